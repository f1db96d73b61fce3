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
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import SetupError, SocietyError

if TYPE_CHECKING:
    from temporalio.client import Client

    from controller.lifecycle.driver import Interrupts, RunReport
    from controller.lifecycle.server import TemporalEndpoint
    from controller.run import Progress, RunSpec
    from controller.run.fork import ForkRequest
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
  3. society ledger verify DIR     check the ledger offline; society grade GRADER.py DIR grades it
Exit: 0 success, 1 failed, 2 could not start, 130/143/129 stopped (ledger finalized; 2nd: now)."""


def add_module_folders(parser: argparse.ArgumentParser) -> None:
    """``--include``/``--writable``: folders the module's sandboxed process reads or writes
    besides its own folder and the Python import path (docs/security.md)."""
    for option, verb in (("--include", "reads"), ("--writable", "writes")):
        parser.add_argument(
            option,
            action="append",
            type=Path,
            default=[],
            metavar="DIR",
            help=f"a folder the module's sandboxed process {verb} too (repeat for more)",
        )


def add_commands(subparsers: Any) -> None:
    from controller.profiles import CLUSTER_TASK_QUEUE, DEFAULT, PROFILES

    run = subparsers.add_parser(
        "run",
        help="run one experiment module and print its result as one JSON line",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=RUN_HELP,
        usage="society run [-h] [options] MODULE.py",
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
        help="local: agents and the module run without bubblewrap (the ledger says so)",
    )
    add_module_folders(run)
    add_variant_options(run)
    run.set_defaults(handler=_run, error_exit=EXIT_SETUP)  # a typed error: it could not start

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


def add_variant_options(run: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (the RunSpec's parameters) and ``--fork DIR --at N``."""
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        type=_setting,
        metavar="K=V",
        help="set a parameter the RunSpec declares (repeat it; V is JSON, else text)",
    )
    run.add_argument(
        "--fork",
        type=Path,
        default=None,
        metavar="DIR",
        help="fork that finished run (its seed and roster) at --at N committed messages",
    )
    run.add_argument("--at", type=int, default=None, help=argparse.SUPPRESS)


def _setting(text: str) -> tuple[str, Any]:
    key, equals, value = text.partition("=")
    if not equals or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (KEY a parameter's name)")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


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


def _print_line(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


# --- society run -----------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    return run_in_process(args, _run_async)


def run_in_process(
    args: argparse.Namespace,
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> int:
    """Run ``main(args)`` as ``society run`` runs a run: this process hosts its worker and
    router."""
    if args.unsandboxed:  # this process hosts the run's worker, which builds the local platform
        from controller.platforms.local.sandbox import UNSANDBOXED_ENV

        os.environ[UNSANDBOXED_ENV] = "1"
    from controller.network.tuning import tune_for_router

    tune_for_router()  # this process hosts the run's router
    try:
        return asyncio.run(main(args))
    except KeyboardInterrupt:  # before the run's own handlers were installed: nothing started
        from controller.lifecycle.driver import RunReport

        _print_line(RunReport("Interrupted", "interrupted", None, None, False, 0, None).line())
        return EXIT_INTERRUPTED


async def _run_async(
    args: argparse.Namespace,
    inner: Callable[[argparse.Namespace, Interrupts], Coroutine[Any, Any, int]] | None = None,
) -> int:
    """``inner`` (``society run``'s own by default) under ``society run``'s stop signals."""
    from controller.lifecycle.driver import Interrupts

    if not os.environ.get("SOCIETY_DEBUG"):
        # The run reports every activity failure itself, as one error line with the next step;
        # the SDK would print the same failure again as a traceback. SOCIETY_DEBUG=1 keeps it.
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    interrupts = Interrupts()
    with _stop_signals(asyncio.get_running_loop(), interrupts):
        return await (inner or _run_with)(args, interrupts)


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

    progress = TerminalProgress()
    root, report = await run_module(args, interrupts, progress)
    return _finish(root, report, progress, interrupts)


async def run_module(
    args: argparse.Namespace,
    interrupts: Interrupts,
    progress: Progress,
    check: Callable[[RunSpec], None] | None = None,
) -> tuple[Path, RunReport]:
    """Load ``args.module`` in a process of its own (``check`` may refuse its spec), submit it as
    ``society run`` does, and keep the module's text in the run directory; the caller reports
    the result."""
    root = artifact_root(args)
    # before Temporal, a run id or a run directory; the module's process lives for the run
    async with _loaded_module(args.module, args.include, args.writable) as (spec, module):
        return await _submit_module(args, interrupts, progress, check, root, spec, module)


async def _submit_module(
    args: argparse.Namespace,
    interrupts: Interrupts,
    progress: Progress,
    check: Callable[[RunSpec], None] | None,
    root: Path,
    spec: RunSpec,
    module: Path,
) -> tuple[Path, RunReport]:
    import anyio

    from controller.lifecycle.submit import Where, submit
    from controller.profiles import profile_named
    from controller.run import RunRequest, new_run_id

    if check is not None:
        check(spec)
    text = await anyio.Path(module).read_text(encoding="utf-8")
    parameters = dict(args.settings)
    spec.parameters_from(parameters)  # refused here, before anything starts
    seed, fork = _fork_of(args, spec)
    profile = profile_named(args.profile)
    where = Where(args.task_queue or profile.task_queue, args.insecure_temporal)
    if where.task_queue is not None and args.unsandboxed:
        raise SetupError(
            f"--unsandboxed applies to a worker in this process; the worker polling "
            f"{where.task_queue} decides for itself",
            reason="unsandboxed-remote",
            next_step="drop --unsandboxed (or --task-queue)",
        )
    ships = where.task_queue is not None or profile.ships_source
    if ships and (parameters or fork is not None):
        raise SetupError(
            "--set and --fork run on the local profile, with the run's worker in this process",
            reason="variant-remote",
            next_step="drop --set/--fork, or run with --profile local and no --task-queue",
        )
    if profile.cluster:
        _apply_cluster_profile(root, args.profile, progress)
    if where.task_queue is None and not profile.cluster:  # this process serves the agents
        await _install_parts(spec, progress)
    # a worker not on this machine gets the module's content, no path (and nothing beside it)
    request = RunRequest.build(
        run_id=args.run_id or new_run_id(),
        module_path=str(module),
        profile=args.profile,
        artifact_root=str(root),  # a worker elsewhere places the run under its own root
        seed=seed,
        module_source=_module_source(module) if ships else None,
        parameters=parameters or None,
        fork=fork,
    )
    report = await submit(request, where=where, spec=spec, progress=progress, interrupts=interrupts)
    if report.run_id is not None:
        keep_module(root / report.run_id, module.name, text)
    return root, report


def _fork_of(args: argparse.Namespace, spec: RunSpec) -> tuple[int | None, ForkRequest | None]:
    """The run's seed and, with ``--fork``, the fork request: the parent's seed, checked."""
    from controller.run.fork import ForkError, read_finished_run

    if args.fork is None:
        if args.at is not None:
            raise ForkError(
                "--at needs --fork",
                reason="fork-point-without-parent",
                next_step="pass --fork PARENT_RUN_DIR --at N, or drop --at",
            )
        return args.seed, None
    if args.at is None:
        raise ForkError(
            "--fork needs --at N",
            reason="fork-point-missing",
            next_step="pass --at N: the number of router-committed messages it shares",
        )
    parent = read_finished_run(args.fork)
    parent.check_spec(spec)
    if args.seed is not None and args.seed != parent.seed:
        raise ForkError(
            f"--seed {args.seed} is not the parent's seed {parent.seed}",
            reason="fork-seed-mismatch",
            next_step="drop --seed: a fork runs with its parent's",
        )
    return parent.seed, parent.request(args.at)


def keep_module(run_dir: Path, name: str, content: str) -> None:
    """The run directory keeps the module that ran (``module/<name>``), for ``society replay``."""
    from controller.lifecycle.activities import MODULE_DIRECTORY

    if not run_dir.is_dir():  # a worker elsewhere keeps it in its own run directory
        return
    kept = run_dir / MODULE_DIRECTORY / name
    if not kept.exists():
        kept.parent.mkdir(exist_ok=True)
        kept.write_text(content, encoding="utf-8")


def _finish(root: Path, report: RunReport, progress: Progress, interrupts: Interrupts) -> int:
    """Keep the result beside the run (if it has a directory here), print the line, exit."""
    keep_result(root, report, progress)
    _print_line(report.line())
    return exit_code(report.outcome, report.exit, interrupts.signum)


def keep_result(root: Path, report: RunReport, progress: Progress) -> None:
    from controller.lifecycle.run_files import write_result

    if report.run_id is not None:
        write_result(root, report.run_id, {**report.line(), "cause": report.cause})
    if report.cause:
        progress.phase(f"{report.outcome}: {report.cause}")


@contextlib.asynccontextmanager
async def _loaded_module(
    path: Path, include: Sequence[Path] = (), writable: Sequence[Path] = ()
) -> AsyncIterator[tuple[RunSpec, Path]]:
    """The module's ``run_spec``, defined before anything starts by the module's own sandboxed
    process (``controller.program``), which runs its program and lives for the block (and may
    read the folders ``include`` names, and write ``writable``); and the module's resolved
    path."""
    import anyio

    from controller.program.child import module_folders
    from controller.program.process import isolated_module
    from controller.run import RunSpecError

    module = Path(await anyio.Path(path).resolve())
    if not await anyio.Path(module).is_file():
        raise SetupError(
            f"{path} is not a file",
            reason="module-missing",
            next_step="pass the path of a MODULE.py defining run_spec",
        )
    async with contextlib.AsyncExitStack() as stack:
        try:
            folders = module_folders(module, include, writable)
            loading = isolated_module(module, folders=folders)
            spec = await stack.enter_async_context(loading)
        except RunSpecError as error:
            if error.reason == "module-import-failed":
                # society's interpreter, which is what failed: a bare `python` may be another one
                check = f" (`{sys.executable} {path}` reproduces the failure)"
            else:
                check = ""  # the module imports; running it would show nothing
            raise RunSpecError(
                error.detail,
                reason=error.reason,
                next_step=f"fix {path}{check} and run again; nothing was started",
            ) from None
        yield spec, module


async def _install_parts(spec: RunSpec, progress: Progress) -> None:
    """Install the local model or OpenClaw where the roster needs one that is missing, before
    anything starts; with ``SOCIETY_NO_INSTALL`` set, fail naming the install command instead."""
    import anyio.to_thread

    from controller.ops.parts import ensure_parts, installs_allowed

    install = installs_allowed()
    await anyio.to_thread.run_sync(
        lambda: ensure_parts(spec.agents, install=install, say=progress.phase)
    )


def _module_source(module: Path) -> ModuleSource:
    from controller.run.module_source import ModuleSource

    return ModuleSource.read(module)


def exit_code(outcome: str, exit: str, signum: int | None) -> int:
    if outcome == "Interrupted":  # 130 for SIGINT and `society cancel`, 143 for SIGTERM
        return EXIT_INTERRUPTED if signum is None else 128 + signum
    return EXIT_SUCCESS if outcome == "ProgramFinished" and exit == "success" else EXIT_FAILURE


async def _reap_stale_asking(
    root: Path, run_id: str
) -> tuple[tuple[Client, TemporalEndpoint] | None, dict[str, Any] | None]:
    """``reap_stale``, asking for ``run_id``'s workflow between ending orphaned workflows and
    stopping a dev server no live run holds: a killed controller's run was often that server's
    last holder, and its answer (``terminated``) would go with it. A Temporal that stops
    answering gives ``(None, None)``, as one that never answered does."""
    from controller.lifecycle import control, server
    from controller.lifecycle.submit import live_temporal, reap_orphans

    temporal = await live_temporal(root)
    await reap_orphans(root, temporal)
    live = None
    if temporal is not None:
        try:
            live = await control.live_status(*temporal, run_id)
        except server.TemporalUnavailable:
            temporal = None
    await server.DevServer(root).reap()
    return temporal, live


# --- society status / cancel -----------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    return _report(_status_async(args))


def _report(work: Coroutine[Any, Any, dict[str, Any]]) -> int:
    """Run ``work`` and print its one JSON line; a typed error goes to ``society``'s one catch,
    which prints it with its next step and exits 1."""
    _print_line(asyncio.run(work))
    return EXIT_SUCCESS


async def _status_async(args: argparse.Namespace) -> dict[str, Any]:
    from controller.lifecycle import run_files, server

    root = artifact_root(args)
    run_id: str = args.run_id
    _, live = await _reap_stale_asking(root, run_id)
    record = run_files.run_record(root, run_id)
    result = run_files.finished_result(root, run_id)
    ledger = run_files.read_ledger_state(root / run_id)
    controller_alive = server.pid_alive(int(record.get("controllerPid") or 0))
    if result:
        return {"state": "finished", **result}
    if not (root / run_id).is_dir():
        raise SocietyError(
            f"no run {run_id} under {root}",
            reason="run-unknown",
            next_step="pass the --artifacts DIR it ran under",
        )
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


def _apply_cluster_profile(root: Path, profile: str, progress: Progress) -> None:
    """The settings ``society cluster up`` wrote for this profile, where the environment has
    none (a variable that is set always wins)."""
    from controller.ops.cluster.profile_file import apply_profile, profile_path

    filled = apply_profile(root, profile)
    if filled:
        names = ", ".join(sorted(filled))
        progress.phase(f"profile {profile}: {names} from {profile_path(root, profile)}")


def _cancel(args: argparse.Namespace) -> int:
    return _report(_cancel_async(args))


async def _cancel_async(args: argparse.Namespace) -> dict[str, Any]:
    from controller.lifecycle import control

    root = artifact_root(args)
    run_id: str = args.run_id
    temporal, live = await _reap_stale_asking(root, run_id)
    if temporal is None or live is None or live["workflow"] != "running":
        raise SocietyError(
            f"run {run_id} is not live under {root}",
            reason="run-not-live",
            next_step=f"`society status {run_id}` shows how it ended",
        )
    workflow = await control.cancel(temporal[0], run_id, wait=not args.no_wait)
    return {
        "runId": run_id,
        "cancel": "requested" if args.no_wait else "done",
        "workflow": workflow,
    }
