"""``society run``, ``society status`` and ``society cancel``.

Temporal, the kernel and the platform load inside the handlers, so ``society ledger ...`` and
``society --help`` stay fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import controller.settings as settings
from controller.lifecycle.runner import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_SETUP,
    EXIT_SUCCESS,
    RunOptions,
    exit_code,
    print_line,
)

if TYPE_CHECKING:
    pass

ARTIFACTS_ENV = settings.ARTIFACTS.name
TASK_QUEUE_ENV = settings.TASK_QUEUE.name
__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_SETUP",
    "EXIT_SUCCESS",
    "add_commands",
    "add_credentials",
    "add_module_folders",
    "add_variant_options",
    "artifact_root",
    "exit_code",
    "run_options",
]


RUN_HELP = """\
Run one experiment once; progress on stderr, one JSON result line on stdout.
  1. write MODULE.py with run_spec = RunSpec.define(id=, agents=, events=, execute=)  (examples/)
  2. society run MODULE.py; then society ledger verify DIR and society grade GRADER.py DIR
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


def add_credentials(parser: argparse.ArgumentParser) -> None:
    """``--credential NAME``: a variable of this environment the run may hand over
    (docs/security.md)."""
    parser.add_argument(
        "--credential",
        dest="credentials",
        action="append",
        default=[],
        metavar="NAME",
        help="an environment variable agents and model providers may be given (repeat it)",
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
        default=settings.current().get(settings.TASK_QUEUE),
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
    add_credentials(run)
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
        help=f"artifact root (default: ${ARTIFACTS_ENV}, else ./{settings.DEFAULT_ARTIFACTS})",
    )


def _run_id(text: str) -> str:
    from controller.run.runid import check_run_id

    try:
        return check_run_id(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} (omit --run-id for a fresh one)") from None


def artifact_root(args: argparse.Namespace) -> Path:
    return settings.current().artifact_root(args.artifacts)


def run_options(args: argparse.Namespace) -> RunOptions:
    """``society run``'s parsed options as the library's ``RunOptions``."""
    return RunOptions(
        profile=args.profile,
        task_queue=args.task_queue,
        insecure_temporal=args.insecure_temporal,
        artifacts=args.artifacts,
        seed=args.seed,
        run_id=args.run_id,
        unsandboxed=args.unsandboxed,
        include=tuple(args.include),
        writable=tuple(args.writable),
        parameters=dict(args.settings),
        credentials=tuple(args.credentials),
        fork=args.fork,
        at=args.at,
    )


# --- society run, status, cancel ------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from controller.lifecycle.runner import run_and_report, run_here

    options = run_options(args)
    return run_here(lambda interrupts: run_and_report(args.module, options, interrupts))


def _status(args: argparse.Namespace) -> int:
    from controller.lifecycle.status import status

    print_line(asyncio.run(status(artifact_root(args), args.run_id)))
    return EXIT_SUCCESS


def _cancel(args: argparse.Namespace) -> int:
    from controller.lifecycle.status import cancel

    print_line(asyncio.run(cancel(artifact_root(args), args.run_id, wait=not args.no_wait)))
    return EXIT_SUCCESS
