"""Run one module file on a profile, as ``society run`` does: the library entry point.

``run_file(path, options)`` loads the module in a sandboxed process of its own, decides who gets
its source and what this machine must install first, builds the request, submits it
(``submit``) and keeps the module's text in the run directory; ``run_here`` runs such a run with
this process as its worker and router host, under the stop signals a user expects; ``RunOptions``
is the whole of what a caller chooses. The ``society`` command parses its options into
``RunOptions``, calls these and prints; a suite runs each of its runs through ``python -m
controller.lifecycle.runner OPTIONS_JSON`` in a child process of its own.
"""

from __future__ import annotations

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

from pydantic import BaseModel, ConfigDict, Field

import controller.settings as settings
from controller.errors import SetupError
from controller.profiles import DEFAULT

if TYPE_CHECKING:
    from controller.lifecycle.driver import Interrupts, RunReport
    from controller.run import Progress, RunSpec
    from controller.run.fork import ForkRequest

EXIT_SUCCESS = 0
EXIT_FAILURE = 1  # the program failed, or the cluster was lost
EXIT_SETUP = 2  # nothing ran: no Temporal, a bad module path, a taken run id
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The first stops the run cleanly (finalize, clean up, print the line); a second one stops at
once (reaps and prints the line); a third exits there and then (``stop_signals``)."""


class RunOptions(BaseModel):
    """What a caller chooses for one run of a module file; ``society run``'s options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str = DEFAULT
    task_queue: str | None = None
    """Submit to the worker polling this queue instead of running a worker here."""
    insecure_temporal: bool = False
    artifacts: Path | None = None
    """The artifact root (``settings.Settings.artifact_root`` decides the default)."""
    seed: int | None = None
    run_id: str | None = None
    unsandboxed: bool = False
    include: tuple[Path, ...] = ()
    """Folders the module's sandboxed process reads besides its own and the import path."""
    writable: tuple[Path, ...] = ()
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The RunSpec's declared parameters (``--set``)."""
    credentials: tuple[str, ...] = ()
    """Variables of this environment the run may hand its agents or send to a model provider
    (``--credential``), besides ``SOCIETY_CREDENTIALS``'s."""
    fork: Path | None = None
    """Run as a fork of this finished run directory, at ``at`` committed messages."""
    at: int | None = None


def artifact_root(options: RunOptions) -> Path:
    return settings.current().artifact_root(options.artifacts)


async def run_file(
    path: Path,
    options: RunOptions,
    *,
    interrupts: Interrupts,
    progress: Progress,
    check: Callable[[RunSpec], None] | None = None,
) -> tuple[Path, RunReport]:
    """Load ``path`` in a process of its own (``check`` may refuse its spec), submit it, and keep
    the module's text in the run directory; returns the artifact root and the run's report."""
    env = settings.current()
    if options.unsandboxed:  # this process hosts the run's worker, which builds the platform
        env = env.overlay({settings.UNSANDBOXED.name: "1"})
    if options.credentials:
        allowed = sorted(env.listed(settings.CREDENTIALS) | set(options.credentials))
        env = env.overlay({settings.CREDENTIALS.name: ",".join(allowed)})
    with settings.installed(env):  # a cluster profile's file may add to them (Profile)
        root = artifact_root(options)
        # before Temporal, a run id or a run directory; the module's process lives for the run
        key = settings.current().get(settings.SIGNING_KEY)
        protected = (root, *([Path(key)] if key else []))
        folders = (options.include, options.writable, protected)
        async with loaded_module(path, *folders) as (spec, module):
            return await _submit_module(options, interrupts, progress, check, root, spec, module)


async def _submit_module(
    options: RunOptions,
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
    from controller.run.module_source import ModuleSource

    if check is not None:
        check(spec)
    text = await anyio.Path(module).read_text(encoding="utf-8")
    parameters = dict(options.parameters)
    spec.parameters_from(parameters)  # refused here, before anything starts
    seed, fork = _fork_of(options, spec)
    profile = profile_named(options.profile)
    where = Where(options.task_queue or profile.task_queue, options.insecure_temporal)
    if where.task_queue is not None and options.unsandboxed:
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
    profile.apply_profile_file(root, progress.phase)
    if where.task_queue is None:  # this process serves the agents
        await profile.install_parts(spec, progress.phase)
    # a worker not on this machine gets the module's content, no path (and nothing beside it)
    request = RunRequest.build(
        run_id=options.run_id or new_run_id(),
        module_path=str(module),
        profile=options.profile,
        artifact_root=str(root),  # a worker elsewhere places the run under its own root
        seed=seed,
        module_source=ModuleSource.read(module) if ships else None,
        parameters=parameters or None,
        fork=fork,
    )
    report = await submit(request, where=where, spec=spec, progress=progress, interrupts=interrupts)
    if report.run_id is not None:
        keep_module(root / report.run_id, module.name, text)
    return root, report


def _fork_of(options: RunOptions, spec: RunSpec) -> tuple[int | None, ForkRequest | None]:
    """The run's seed and, with ``fork``, the fork request: the parent's seed, checked."""
    from controller.run.fork import ForkError, read_finished_run

    if options.fork is None:
        if options.at is not None:
            raise ForkError(
                "--at needs --fork",
                reason="fork-point-without-parent",
                next_step="pass --fork PARENT_RUN_DIR --at N, or drop --at",
            )
        return options.seed, None
    if options.at is None:
        raise ForkError(
            "--fork needs --at N",
            reason="fork-point-missing",
            next_step="pass --at N: the number of router-committed messages it shares",
        )
    parent = read_finished_run(options.fork)
    parent.check_spec(spec)
    if options.seed is not None and options.seed != parent.seed:
        raise ForkError(
            f"--seed {options.seed} is not the parent's seed {parent.seed}",
            reason="fork-seed-mismatch",
            next_step="drop --seed: a fork runs with its parent's",
        )
    return parent.seed, parent.request(options.at)


def keep_module(run_dir: Path, name: str, content: str) -> None:
    """The run directory keeps the module that ran (``module/<name>``), for ``society replay``."""
    from controller.lifecycle.activities import MODULE_DIRECTORY

    if not run_dir.is_dir():  # a worker elsewhere keeps it in its own run directory
        return
    kept = run_dir / MODULE_DIRECTORY / name
    if not kept.exists():
        kept.parent.mkdir(exist_ok=True)
        kept.write_text(content, encoding="utf-8")


def keep_result(root: Path, report: RunReport, progress: Progress) -> None:
    """The result beside the run (if it has a directory here), and its cause as a phase."""
    from controller.lifecycle.run_files import write_result

    if report.run_id is not None:
        write_result(root, report.run_id, {**report.line(), "cause": report.cause})
    if report.cause:  # the program's own words: one line, whatever it holds
        cause = report.cause.replace("\n", "\\n")
        progress.phase(f"{report.outcome}: {cause}")


@contextlib.asynccontextmanager
async def loaded_module(
    path: Path,
    include: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    protected: Sequence[Path] = (),
) -> AsyncIterator[tuple[RunSpec, Path]]:
    """The module's ``run_spec``, defined before anything starts by the module's own sandboxed
    process (``controller.program``), which runs its program and lives for the block (and may
    read the folders ``include`` names, and write ``writable``; never what ``protected`` names);
    and the module's resolved path."""
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
            folders = module_folders(module, include, writable, protected)
            loading = isolated_module(module, folders=folders)
            spec = await stack.enter_async_context(loading)
        except RunSpecError as error:
            if error.reason == "module-import-failed":
                # society's interpreter, which is what failed: a bare `python` may be another one
                check = f" (`{sys.executable} {path}` reproduces the failure)"
            else:
                check = ""  # the module imports; running it would show nothing
            fix = f"{error.next_step}," if error.next_step else f"fix {path}{check}"
            raise RunSpecError(
                error.detail,
                reason=error.reason,
                next_step=f"{fix} and run again; nothing was started",
            ) from None
        yield spec, module


def exit_code(outcome: str, exit: str, signum: int | None) -> int:
    if outcome == "Interrupted":  # 130 for SIGINT and `society cancel`, 143 for SIGTERM
        return EXIT_INTERRUPTED if signum is None else 128 + signum
    return EXIT_SUCCESS if outcome == "ProgramFinished" and exit == "success" else EXIT_FAILURE


def print_line(document: dict[str, Any]) -> None:
    """One JSON line on stdout: a run's result, or a command's answer."""
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def run_here(main: Callable[[Interrupts], Coroutine[Any, Any, int]]) -> int:
    """Run ``main`` as ``society run`` runs a run: this process hosts its worker and router,
    and the first two stop signals reach ``main``'s ``Interrupts``."""
    from controller.network.tuning import tune_for_router

    tune_for_router()  # this process hosts the run's router
    try:
        return asyncio.run(_under_stop_signals(main))
    except KeyboardInterrupt:  # before the run's own handlers were installed: nothing started
        from controller.lifecycle.driver import RunReport

        print_line(RunReport("Interrupted", "interrupted", None, None, False, 0, None).line())
        return EXIT_INTERRUPTED


async def _under_stop_signals(main: Callable[[Interrupts], Coroutine[Any, Any, int]]) -> int:
    from controller.lifecycle.driver import Interrupts

    if not settings.current().flag(settings.DEBUG):
        # The run reports every activity failure itself, as one error line with the next step;
        # the SDK would print the same failure again as a traceback. SOCIETY_DEBUG=1 keeps it.
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    interrupts = Interrupts()
    with stop_signals(asyncio.get_running_loop(), interrupts):
        return await main(interrupts)


@contextlib.contextmanager
def stop_signals(loop: asyncio.AbstractEventLoop, interrupts: Interrupts) -> Iterator[None]:
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


async def run_and_report(path: Path, options: RunOptions, interrupts: Interrupts) -> int:
    """``run_file`` with progress on stderr; keeps and prints the result line, returns the exit
    code (``society run``'s and a suite run's)."""
    from controller.run.terminal import TerminalProgress

    progress = TerminalProgress()
    root, report = await run_file(path, options, interrupts=interrupts, progress=progress)
    keep_result(root, report, progress)
    print_line(report.line())
    return exit_code(report.outcome, report.exit, interrupts.signum)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m controller.lifecycle.runner MODULE.py OPTIONS_JSON``: one run in this
    process, as a suite starts each of its runs; one JSON result line on stdout."""
    from controller.errors import SocietyError
    from ledger.errors import LedgerError
    from ledger.terminal import terminal_safe

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        usage = "usage: python -m controller.lifecycle.runner MODULE.py OPTIONS_JSON"
        print(usage, file=sys.stderr)
        return EXIT_SETUP
    path, options = Path(args[0]), RunOptions.model_validate_json(args[1])
    try:
        with settings.installed(settings.Settings.read()):  # this entry point's one read
            return run_here(lambda interrupts: run_and_report(path, options, interrupts))
    except (SocietyError, LedgerError) as error:
        shown = "\n".join(terminal_safe(line) for line in str(error).split("\n"))
        print(f"society run: error: {shown}", file=sys.stderr, flush=True)
        return EXIT_SETUP


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # as `society`: the Temporal SDK's native threads may crash the interpreter's teardown
    os._exit(code)
