"""``society run``, ``society status`` and ``society cancel``.

Temporal, the kernel and the platform load inside the handlers, so ``society ledger ...`` and
``society --help`` stay fast.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

    from controller.lifecycle.driver import Interrupts, RunReport
    from controller.lifecycle.server import TemporalEndpoint
    from controller.run import RunSpec
    from controller.run.module_source import ModuleSource

DEFAULT_ARTIFACTS = Path("artifacts")
ARTIFACTS_ENV = "SOCIETY_ARTIFACTS"
TASK_QUEUE_ENV = "SOCIETY_TASK_QUEUE"

EXIT_SUCCESS = 0
EXIT_FAILURE = 1  # the program failed, or the cluster was lost
EXIT_SETUP = 2  # nothing ran: no Temporal, a bad module path, a taken run id
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The first stops the run cleanly (finalize, clean up, print the line); a second one stops at
once (reaps and prints the line); a third exits there and then (``_stop_signals``)."""


RUN_HELP = """\
Run one experiment once; progress on stderr, one JSON result line on stdout.
  1. write MODULE.py with run_spec = RunSpec.define(id=, agents=, events=, execute=)  (examples/)
  2. society run MODULE.py         start the agents, run execute(ctx) once, sign the ledger
  3. society ledger verify DIR     check the result's ledger directory offline
  4. society grade GRADER.py DIR   verify, then grade it with your grader (examples/graders/)
Exit: 0 success, 1 program failed or cluster lost, 2 could not start, 130/143/129 stopped (SIGINT
or `society cancel`/SIGTERM/SIGHUP; ledger finalized first; 2nd Ctrl-C: at once; 3rd: exit now)."""


class SetupError(Exception):
    """The run could not start; ``reason`` is machine-readable, the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def add_commands(subparsers: Any) -> None:
    from controller.profiles import CLUSTER_TASK_QUEUE, DEFAULT, PROFILES

    run = subparsers.add_parser(
        "run",
        help="run one experiment module and print its result as one JSON line",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=RUN_HELP,
    )
    run.add_argument(
        "module", metavar="MODULE.py", type=Path, help="defines run_spec = RunSpec.define(...)"
    )
    run.add_argument(
        "--profile",
        choices=list(PROFILES),
        default=DEFAULT,
        metavar="NAME",
        help="local (default): a process per agent; kind, gke, kubernetes: pods",
    )
    run.add_argument(
        "--task-queue",
        default=os.environ.get(TASK_QUEUE_ENV) or None,
        metavar="Q",
        help=f"run on the worker polling Q (${TASK_QUEUE_ENV}; gke: {CLUSTER_TASK_QUEUE})",
    )
    run.add_argument(
        "--insecure-temporal",
        action="store_true",
        help="with --task-queue: trust a Temporal that authenticates no client",
    )
    _add_artifacts(run)
    run.add_argument("--seed", type=int, default=None, help="seed passed to the run")
    run.add_argument(
        "--run-id", type=_run_id, default=None, metavar="ID", help="sr- + 32 lowercase hex digits"
    )
    run.add_argument(
        "--unsandboxed",
        action="store_true",
        help="local: agents run without the bubblewrap sandbox (the ledger records it)",
    )
    run.set_defaults(handler=_run)

    status = subparsers.add_parser(
        "status",
        help="show a live run's state, or a finished run's result",
        description="Print one JSON line whose state is running (with its phase from Temporal), "
        "finalizing (a cancel was asked or its workflow closed; its controller is finishing), "
        "finished (with its result) or abandoned (its controller died before reporting).",
    )
    status.add_argument("run_id", metavar="RUN_ID", type=_run_id)
    _add_artifacts(status)
    status.set_defaults(handler=_status)

    cancel = subparsers.add_parser(
        "cancel",
        help="cancel a live run (its ledger is finalized and its processes reaped)",
        description="Cancel a live run by id. The run's own `society run` finalizes the ledger, "
        "cleans up and reports Interrupted. Waits for that unless --no-wait.",
    )
    cancel.add_argument("run_id", metavar="RUN_ID", type=_run_id)
    _add_artifacts(cancel)
    cancel.add_argument("--no-wait", action="store_true", help="return once cancel is requested")
    cancel.set_defaults(handler=_cancel)


def _add_artifacts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"artifact root (default: ${ARTIFACTS_ENV}, else ./{DEFAULT_ARTIFACTS})",
    )


def _run_id(text: str) -> str:
    from controller.run.runid import check_run_id

    try:
        return check_run_id(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} (omit --run-id for a fresh one)") from None


def artifact_root(args: argparse.Namespace) -> Path:
    chosen = args.artifacts or Path(os.environ.get(ARTIFACTS_ENV) or DEFAULT_ARTIFACTS)
    return Path(chosen).resolve()


def _error(command: str, message: str) -> None:
    print(f"society {command}: error: {message}", file=sys.stderr, flush=True)


def _print_line(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


# --- society run -----------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    if args.unsandboxed:  # this process hosts the run's worker, which builds the local platform
        from controller.platforms.local.sandbox import UNSANDBOXED_ENV

        os.environ[UNSANDBOXED_ENV] = "1"
    from controller.network.tuning import tune_for_router

    tune_for_router()  # this process hosts the run's router
    try:
        return asyncio.run(_run_async(args))
    except SetupError as error:
        _error("run", str(error))
        return EXIT_SETUP
    except KeyboardInterrupt:  # before the run's own handlers were installed: nothing started
        from controller.lifecycle.driver import RunReport

        _print_line(RunReport("Interrupted", "interrupted", None, None, False, 0, None).line())
        return EXIT_INTERRUPTED


async def _run_async(args: argparse.Namespace) -> int:
    from controller.lifecycle.driver import Interrupts

    if not os.environ.get("SOCIETY_DEBUG"):
        # The run reports every activity failure itself, as one error line with the next step;
        # the SDK would print the same failure again as a traceback. SOCIETY_DEBUG=1 keeps it.
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    interrupts = Interrupts()
    with _stop_signals(asyncio.get_running_loop(), interrupts):
        return await _run_with(args, interrupts)


@contextlib.contextmanager
def _stop_signals(loop: asyncio.AbstractEventLoop, interrupts: Interrupts) -> Iterator[None]:
    """Hand the first two stop signals to ``interrupts`` on ``loop``; exit on the third.

    The handler is the interpreter's, not the loop's (``add_signal_handler``), so it runs even
    while a program blocks the event loop (``time.sleep`` in a coroutine) or ignores its
    cancellation, which would otherwise hold `society run` for good. The third signal leaves
    what a killed controller leaves: its agents die with it, the ledger's durable prefix
    verifies, and the next `society` start ends the workflow and reaps the rest.
    """
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 2:
            _say(f"{name} again: stopping at once (a third {name} exits without finalizing)")
        elif len(received) > 2:
            _say(
                f"{name} a third time: exiting now, without finalizing; the ledger's durable "
                "prefix verifies with --allow-incomplete, and the next `society` command "
                "reaps what is left"
            )
            os._exit(128 + received[0])
        try:
            loop.call_soon_threadsafe(interrupts, signum)
        except RuntimeError:  # the loop has closed: the run is over
            pass

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


def _say(line: str) -> None:
    """One line on stderr from a signal handler: unbuffered, so it cannot meet a half-written
    line of ``sys.stderr``'s buffer."""
    os.write(2, (line + "\n").encode())


async def _run_with(args: argparse.Namespace, interrupts: Interrupts) -> int:
    from controller.cli.progress import TerminalProgress
    from controller.lifecycle import server
    from controller.lifecycle.driver import RunDriver, RunRefused, RunReport
    from controller.profiles import profile_named
    from controller.run import RunRequest, new_run_id
    from controller.run.request import RunRequestError

    root = artifact_root(args)
    progress = TerminalProgress()
    spec, module = _load_module(args.module)  # before Temporal, a run id or a run directory
    profile = profile_named(args.profile)
    if profile.cluster:
        _apply_cluster_profile(root, args.profile, progress)
    queue = args.task_queue or profile.task_queue
    if queue is not None:
        report = await _submit(args, queue, module, root, progress, interrupts)
        return _finish(root, report, progress, interrupts)
    await reap_stale(root, await _live_temporal(root))
    if profile.cluster:
        await _check_cluster()
    run_id = args.run_id or new_run_id()
    if (root / run_id).exists():
        raise SetupError("run-id-taken", f"{root / run_id} exists; omit --run-id for a fresh id")
    try:
        request = RunRequest.build(
            run_id=run_id,
            module_path=str(module),
            profile=args.profile,
            artifact_root=str(root),
            seed=args.seed,
            # a cluster's run worker is not on this machine: it gets the module's content, no path
            module_source=_module_source(module) if profile.ships_source else None,
        )
    except RunRequestError as error:
        raise SetupError(error.reason, str(error)) from None

    dev_server: server.DevServer | None = None
    try:
        with interrupts.cancelling() as setup:
            try:
                endpoint = server.configured_endpoint()
                if endpoint is None:
                    dev_server = server.DevServer(root)
                    progress.phase("temporal: starting or joining the local dev server")
                    endpoint = await dev_server.acquire(run_id)
                client = await server.connect(endpoint)
            except server.TemporalUnavailable as error:
                raise SetupError(error.reason, str(error)) from None
        if setup.cancelled_caught:
            report = RunReport.from_artifacts(root, run_id, "Interrupted")
        else:
            ui = server.workflow_url(endpoint, run_id)
            progress.phase(f"run {run_id}: Temporal at {endpoint.address}")
            progress.phase(f"temporal ui: {ui or f'not known (set {server.UI_ENV})'}")
            driver = RunDriver(
                client, endpoint, request, spec=spec, progress=progress, interrupts=interrupts
            )
            try:
                report = await driver.drive()
            except RunRefused as error:
                raise SetupError(error.reason, str(error)) from None
    finally:
        if dev_server is not None:
            await dev_server.release(run_id)
    return _finish(root, report, progress, interrupts)


def _finish(root: Path, report: RunReport, progress: Any, interrupts: Interrupts) -> int:
    """Keep the result beside the run (if it has a directory here), print the line, exit."""
    from controller.lifecycle.run_files import write_result

    if report.run_id is not None:
        write_result(root, report.run_id, {**report.line(), "cause": report.cause})
    if report.cause:
        progress.phase(f"{report.outcome}: {report.cause}")
    _print_line(report.line())
    return exit_code(report.outcome, report.exit, interrupts.signum)


async def _submit(
    args: argparse.Namespace,
    queue: str,
    module: Path,
    root: Path,
    progress: Any,
    interrupts: Interrupts,
) -> RunReport:
    """``--task-queue``: submit to the worker polling ``queue`` on the configured Temporal and
    wait for it; no worker runs here (``controller.lifecycle.remote``, which says why
    its result is trusted only from a Temporal that authenticates its clients)."""
    from controller.lifecycle import server
    from controller.lifecycle.driver import RunRefused, RunReport
    from controller.lifecycle.remote import SubmittedRun, check_authenticated
    from controller.profiles import profile_named
    from controller.run import RunRequest, new_run_id
    from controller.run.request import RunRequestError

    if args.unsandboxed:
        raise SetupError(
            "unsandboxed-remote",
            f"--unsandboxed applies to a worker in this process; the worker polling {queue} "
            "decides for itself\n  next step: drop --unsandboxed (or --task-queue)",
        )
    endpoint = server.configured_endpoint()
    if endpoint is None:
        raise SetupError(
            "temporal-address-missing",
            f"task queue {queue} is polled by a run worker on your Temporal, and "
            f"{server.ADDRESS_ENV} is not set\n  next step: set {server.ADDRESS_ENV} (host:port) "
            f"and {server.NAMESPACE_ENV} of the Temporal that worker polls, with "
            f"{server.TLS_DIR_ENV} or {server.API_KEY_ENV} (GKE: what the chart's Temporal Secret "
            "holds)",
        )
    try:
        check_authenticated(endpoint, allow_unauthenticated=args.insecure_temporal)
    except (RunRefused, server.TemporalUnavailable) as error:
        raise SetupError(error.reason, str(error)) from None
    await reap_stale(root, await _live_temporal(root))
    run_id = args.run_id or new_run_id()
    try:
        request = RunRequest.build(
            run_id=run_id,
            module_path=str(module),  # names it only: the worker runs module_source
            profile=args.profile,
            artifact_root=str(root),  # the worker's own artifact root replaces it
            seed=args.seed,
            module_source=_module_source(module),
        )
    except RunRequestError as error:
        raise SetupError(error.reason, str(error)) from None
    with interrupts.cancelling() as setup:
        try:
            client = await server.connect(endpoint)
        except server.TemporalUnavailable as error:
            raise SetupError(error.reason, str(error)) from None
    if setup.cancelled_caught:
        return RunReport("Interrupted", "interrupted", run_id, None, False, 0, None)
    ui = server.workflow_url(endpoint, run_id)
    progress.phase(f"run {run_id}: Temporal at {endpoint.address}, namespace {endpoint.namespace}")
    progress.phase(f"temporal ui: {ui or f'not known (set {server.UI_ENV})'}")
    submitted = SubmittedRun(
        client,
        endpoint,
        request,
        task_queue=queue,
        progress=progress,
        interrupts=interrupts,
        require_export=profile_named(args.profile).exports,
    )
    try:
        return await submitted.drive()
    except RunRefused as error:
        raise SetupError(error.reason, str(error)) from None


def _load_module(path: Path) -> tuple[RunSpec, Path]:
    """The module's ``run_spec``, loaded before anything starts, and the module's resolved path."""
    from controller.run import RunSpecError, load_run_spec

    module = path.resolve()
    if not module.is_file():
        raise SetupError(
            "module-missing",
            f"{path} is not a file\n  next step: pass the path of a MODULE.py defining run_spec",
        )
    try:
        return load_run_spec(module), module
    except RunSpecError as error:
        raise SetupError(
            error.reason,
            f"{error}\n  next step: fix {path} (check it with `python {path}`) and run again; "
            "nothing was started",
        ) from None


def _module_source(module: Path) -> ModuleSource:
    from controller.run.module_source import ModuleSource, ModuleSourceError

    try:
        return ModuleSource.read(module)
    except ModuleSourceError as error:
        raise SetupError(error.reason, str(error)) from None


def exit_code(outcome: str, exit: str, signum: int | None) -> int:
    if outcome == "Interrupted":  # 130 for SIGINT and `society cancel`, 143 for SIGTERM
        return EXIT_INTERRUPTED if signum is None else 128 + signum
    return EXIT_SUCCESS if outcome == "ProgramFinished" and exit == "success" else EXIT_FAILURE


async def _live_temporal(root: Path) -> tuple[Client, TemporalEndpoint] | None:
    """A client for the Temporal this root's runs use, if one answers."""
    from controller.lifecycle import server

    endpoint = server.configured_endpoint() or server.DevServer(root).live_endpoint()
    if endpoint is None:
        return None
    try:
        return await server.connect(endpoint), endpoint
    except server.TemporalUnavailable:
        return None


async def reap_stale(root: Path, temporal: tuple[Client, TemporalEndpoint] | None) -> None:
    """What every ``society`` start does: reap what dead runs left, end their workflows, and
    stop a dev server no live run holds."""
    import anyio.to_thread

    from controller.lifecycle import control, server
    from controller.platforms.local import reap_stale_runs

    reports = await anyio.to_thread.run_sync(reap_stale_runs, root)
    orphans = [report.run_id for report in reports if report.skipped is None]
    if orphans and temporal is not None:
        await control.terminate_orphans(temporal[0], orphans)
    await server.DevServer(root).reap()


# --- society status / cancel -----------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    return _report("status", _status_async(args))


def _report(command: str, work: Coroutine[Any, Any, dict[str, Any]]) -> int:
    """Run ``work`` and print its one JSON line, or the error with its next step."""
    try:
        document = asyncio.run(work)
    except SetupError as error:
        _error(command, str(error))
        return EXIT_FAILURE
    _print_line(document)
    return EXIT_SUCCESS


async def _status_async(args: argparse.Namespace) -> dict[str, Any]:
    from controller.lifecycle import control, run_files, server

    root = artifact_root(args)
    run_id: str = args.run_id
    temporal = await _live_temporal(root)
    await reap_stale(root, temporal)
    live = None if temporal is None else await control.live_status(*temporal, run_id)
    record = run_files.run_record(root, run_id)
    result = run_files.finished_result(root, run_id)
    ledger = run_files.read_ledger_state(root / run_id)
    controller_alive = server.pid_alive(int(record.get("controllerPid") or 0))
    if result:
        return {"state": "finished", **result}
    if not (root / run_id).is_dir():
        raise SetupError("run-unknown", f"no run {run_id} under {root} (pass --artifacts DIR?)")
    on_disk = {
        "module": record.get("module"),
        "ledger": ledger.directory,
        "receipt": "complete" if ledger.complete else "incomplete",
        "records": ledger.records,
        "publicKey": ledger.public_key,
    }
    if controller_alive:
        if live is None:  # its controller lives, but this Temporal does not know the workflow
            return {"state": "running", "runId": run_id, "workflow": None, **on_disk}
        if live["workflow"] == "running" and not live["cancelRequested"]:
            return {"state": "running", **live, **on_disk}
        # cancelled (or its workflow closed) and its controller still finalizing and cleaning up
        return {"state": "finalizing", **live, **on_disk}
    # No result and no live controller: it died before reporting.
    workflow = None if live is None else live["workflow"]
    return {"state": "abandoned", "runId": run_id, "workflow": workflow, **on_disk}


def _apply_cluster_profile(root: Path, profile: str, progress: Any) -> None:
    """The settings ``society cluster up`` wrote for this profile, where the environment has
    none (a variable that is set always wins)."""
    from controller.ops.cluster.profile_file import (
        ProfileFileError,
        apply_profile,
        profile_path,
    )

    try:
        filled = apply_profile(root, profile)
    except ProfileFileError as error:
        raise SetupError(error.reason, str(error)) from None
    if filled:
        names = ", ".join(sorted(filled))
        progress.phase(f"profile {profile}: {names} from {profile_path(root, profile)}")


async def _check_cluster() -> None:
    from controller.platforms.kubernetes.preflight import ClusterUnavailable, check_cluster
    from controller.platforms.kubernetes.settings import KubernetesSettings

    try:
        await check_cluster(KubernetesSettings.from_environment())
    except ClusterUnavailable as error:
        raise SetupError(error.reason, str(error)) from None


def _cancel(args: argparse.Namespace) -> int:
    return _report("cancel", _cancel_async(args))


async def _cancel_async(args: argparse.Namespace) -> dict[str, Any]:
    from controller.lifecycle import control

    root = artifact_root(args)
    run_id: str = args.run_id
    temporal = await _live_temporal(root)
    await reap_stale(root, temporal)
    live = None if temporal is None else await control.live_status(*temporal, run_id)
    if temporal is None or live is None or live["workflow"] != "running":
        raise SetupError(
            "run-not-live",
            f"run {run_id} is not live under {root} (`society status {run_id}` shows how it ended)",
        )
    workflow = await control.cancel(temporal[0], run_id, wait=not args.no_wait)
    return {
        "runId": run_id,
        "cancel": "requested" if args.no_wait else "done",
        "workflow": workflow,
    }
