"""``society suite run`` and ``society suite verify``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from controller.cli.run_commands import ARTIFACTS_ENV, artifact_root
from controller.profiles import DEFAULT, PROFILES
from controller.settings import DEFAULT_ARTIFACTS

EXIT_SUCCESS, EXIT_FAILURE, EXIT_SETUP = 0, 1, 2
EXIT_INTERRUPTED = 128 + signal.SIGINT


def add_commands(subparsers: Any) -> None:
    suite = subparsers.add_parser(
        "suite",
        help="run a suite (competitors x seeds), rank it; verify a suite's results",
        description="Many runs of one experiment across competitors and seeds, with a "
        "leaderboard and ratings anyone can recompute.",
    )
    commands = suite.add_subparsers(dest="suite_command", required=True, metavar="SUBCOMMAND")
    run = commands.add_parser(
        "run",
        help="run every run of SUITE.py, grade and rank them",
        description=(
            "Runs every matchup of SUITE.py's `suite` on every seed as `society run`, a few at a "
            "time, then writes DIR/<suite id>/suite.json and leaderboard.md and prints one JSON "
            "line. Interrupted (Ctrl-C), it stops its live runs cleanly; run it again to resume: "
            "complete, verified runs are kept, the rest run again. Exit 0 once every run ran "
            "(failed runs are reported, not ranked), 2 for a bad suite, 130 interrupted."
        ),
    )
    run.add_argument("module", metavar="SUITE.py", type=Path, help="a module defining `suite`")
    run.add_argument(
        "--profile",
        choices=list(PROFILES),
        default=DEFAULT,
        help="the profile every run uses (see `society run --help`); default local",
    )
    run.add_argument(
        "--artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where DIR/<suite id>/ goes (default: ${ARTIFACTS_ENV}, else ./{DEFAULT_ARTIFACTS})",
    )
    run.add_argument(
        "--jobs", type=_positive, default=None, metavar="N", help="runs at once (default 2)"
    )
    run.set_defaults(handler=_run)

    verify = commands.add_parser(
        "verify",
        help="re-verify every ledger, re-grade, recompute suite.json and leaderboard.md",
        description=(
            "Recomputes every field of DIR/<suite id>/suite.json (except `timing`) and all of "
            "leaderboard.md from the ledgers and the grader of SUITE.py (the module you trust; "
            "nothing the folder names is imported). Prints one JSON line; exit 0 when "
            '{"valid": true}, 1 on any difference.'
        ),
    )
    verify.add_argument("directory", metavar="SUITE_DIR", type=Path)
    verify.add_argument(
        "--suite",
        type=Path,
        required=True,
        metavar="SUITE.py",
        help="the suite module you trust (nothing SUITE_DIR names is imported)",
    )
    verify.add_argument(
        "--trusted-key",
        type=Path,
        metavar="FILE",
        help="public key (ed25519:<base64> or PEM) every run's ledger must be signed by",
    )
    verify.set_defaults(handler=_verify)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _run(args: argparse.Namespace) -> int:
    import anyio

    from controller.run.terminal import TerminalProgress
    from controller.suites.definition import SuiteError, load_suite
    from controller.suites.runner import DEFAULT_JOBS, SuiteRunner

    try:
        suite = load_suite(args.module)
        grader = suite.grader_path()
        if not grader.is_file():
            raise SuiteError(
                f"the suite's grader {grader} does not exist; fix `grader=` in {args.module}",
                reason="grader-missing",
            )
        runner = SuiteRunner(
            suite,
            artifact_root(args),
            profile=args.profile,
            jobs=args.jobs or DEFAULT_JOBS,
            progress=TerminalProgress(),
        )
    except SuiteError as error:
        return _error("suite run", error.reason, str(error), EXIT_SETUP)

    async def main() -> Any:
        stop = anyio.Event()
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        stop.set()
                        return

            group.start_soon(watch)
            outcome = await runner.run(stop)
            group.cancel_scope.cancel()
        return outcome

    try:
        outcome = anyio.run(main)
    except SuiteError as error:
        return _error("suite run", error.reason, str(error), EXIT_FAILURE)
    if outcome.interrupted:
        _print({"suite": suite.id, "state": "interrupted", "folder": str(runner.folder.root)})
        print(
            "society suite run: interrupted; run the same command again to resume", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    report = outcome.report
    assert report is not None  # not interrupted
    _print(
        {
            "suite": suite.id,
            "state": "finished",
            "runs": len(report.runs),
            "ranked": report.ranked,
            "reported": len(report.runs) - report.ranked,
            "kept": outcome.kept,
            "ran": outcome.started,
            "suiteJson": str(runner.folder.suite_json),
            "leaderboard": str(runner.folder.leaderboard),
        }
    )
    return EXIT_SUCCESS


def _verify(args: argparse.Namespace) -> int:
    from controller.suites.definition import SuiteError
    from controller.suites.verify import verify_suite
    from ledger import LedgerError
    from ledger.signing import load_trusted_key

    try:
        key = load_trusted_key(args.trusted_key) if args.trusted_key else None
        result = verify_suite(args.directory, module=args.suite, trusted_key=key)
    except (SuiteError, LedgerError) as error:
        _print({"valid": False, "reason": error.reason, "detail": str(error)})
        return EXIT_FAILURE
    _print(result.as_json())
    return EXIT_SUCCESS if result.valid else EXIT_FAILURE


def _error(command: str, reason: str, message: str, code: int) -> int:
    print(f"society {command}: error ({reason}): {message}", file=sys.stderr, flush=True)
    return code


def _print(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()
