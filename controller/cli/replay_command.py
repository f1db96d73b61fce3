"""``society replay RUN_DIR``: run a finished run's own module again, same seed, roster and
parameters, and compare the two ledgers conversation by conversation."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import SetupError

if TYPE_CHECKING:
    from controller.lifecycle.driver import Interrupts
    from controller.lifecycle.runner import RunOptions
    from controller.run.fork import FinishedRun

EXIT_IDENTICAL = 0
EXIT_DIVERGED = 1


def add_commands(subparsers: Any) -> None:
    from controller.cli.run_commands import EXIT_SETUP, add_credentials, add_module_folders
    from controller.profiles import PROFILES

    replay = subparsers.add_parser(
        "replay",
        help="run a finished run's module again (same seed, roster, parameters) and compare",
        description=(
            "Verifies RUN_DIR's ledger, runs the module the run directory kept (module/) again "
            "with the same seed, roster and parameters as a new run beside it, and compares the "
            "two ledgers as `society ledger compare` does (per conversation and per receiver, not "
            "by global commit order). Prints one JSON line whose replay is identical or diverged "
            "(with the causally earliest divergence: which conversation and message, whose, both "
            "sides); exit 0 identical, 1 diverged or the replay failed."
        ),
    )
    replay.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished run directory")
    replay.add_argument(
        "--profile",
        choices=list(PROFILES),
        default=None,
        metavar="NAME",
        help="where the replay runs (default: the profile the run ran on)",
    )
    replay.add_argument(
        "--artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help="artifact root of the replay (default: the one RUN_DIR is in)",
    )
    replay.add_argument(
        "--unsandboxed",
        action="store_true",
        help="local: agents and the module run without bubblewrap",
    )
    add_module_folders(replay)
    add_credentials(replay)
    replay.set_defaults(handler=_replay, error_exit=EXIT_SETUP)


def _replay(args: argparse.Namespace) -> int:
    from controller.lifecycle.runner import RunOptions, run_here
    from controller.run.fork import read_finished_run

    original = read_finished_run(args.run_dir)
    if original.fork is not None:
        raise SetupError(
            f"{original.run_id} is a fork of {original.fork.get('parentRunId')}; its replay "
            "would need its parent as well",
            reason="replay-of-fork",
            next_step=f"fork the parent again: society run MODULE.py --fork PARENT_RUN_DIR "
            f"--at {original.fork.get('at')}",
        )
    module = kept_module(args.run_dir.resolve(), original.run_id)
    options = RunOptions(
        profile=args.profile or original.profile,
        artifacts=args.artifacts or args.run_dir.resolve().parent,
        seed=original.seed,
        unsandboxed=args.unsandboxed,
        include=tuple(args.include),
        writable=tuple(args.writable),
        parameters=dict(original.parameters or {}),
        credentials=tuple(args.credentials),
    )
    return run_here(lambda interrupts: _replay_and_compare(module, options, interrupts, original))


async def _replay_and_compare(
    module: Path, options: RunOptions, interrupts: Interrupts, original: FinishedRun
) -> int:
    from controller.lifecycle.runner import exit_code, keep_result, run_file
    from controller.run.terminal import TerminalProgress

    progress = TerminalProgress()
    root, report = await run_file(
        module, options, interrupts=interrupts, progress=progress, check=original.check_spec
    )
    keep_result(root, report, progress)
    line: dict[str, Any] = {"original": original.run_id, **report.line()}
    if report.run_id is None or report.ledger_dir is None:
        _print({"replay": "failed", **line})
        return exit_code(report.outcome, report.exit, interrupts.signum) or EXIT_DIVERGED
    verdict = compare(original.ledger, Path(report.ledger_dir))
    _print({**verdict, **line})
    return EXIT_IDENTICAL if verdict["replay"] == "identical" else EXIT_DIVERGED


def compare(original: Path, replayed: Path) -> dict[str, Any]:
    """``identical``, or the causally earliest divergence: which stream and item, whose, both
    sides (``controller.viewer.compare``: per conversation and per receiver, not global order)."""
    from controller.viewer.compare import BY, evidence_divergence, read_evidence
    from ledger import LedgerError

    try:
        replay = read_evidence(replayed)
        divergence = evidence_divergence(read_evidence(original), replay)
    except LedgerError as error:
        return {"replay": "diverged", "by": BY, "reason": error.reason, "detail": error.detail}
    if divergence is None:
        conversations = len(replay.conversations)
        plural = "" if conversations == 1 else "s"
        _say(
            f"identical: {replay.messages} messages in {conversations} conversation{plural}, "
            "each receiver's deliveries, and the program's own events and outcome"
        )
        return {"replay": "identical", "by": BY, "messages": replay.messages}
    a, b = divergence.a, divergence.b
    whose = next((x["sender"] for x in (a, b) if isinstance(x, dict) and "sender" in x), None)
    differs = (
        sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
        if isinstance(a, dict) and isinstance(b, dict)
        else None
    )
    where = f"{divergence.stream}, item {divergence.index + 1}"
    what = differs or ("presence" if a is None or b is None else "order")
    _say(f"diverged at {where}" + (f" ({whose})" if whose else "") + f": {what}")
    found: dict[str, Any] = {"stream": divergence.stream, "index": divergence.index}
    if divergence.message is not None:
        found["message"] = divergence.message
    return {
        "replay": "diverged",
        "by": BY,
        "divergence": {
            **found,
            "sender": whose,
            "differs": differs,
            "original": a,
            "replay": b,
        },
    }


def kept_module(run_dir: Path, run_id: str) -> Path:
    """The module the run ran: its recorded path when that file still holds the kept text (so
    the modules beside it import), else the copy the run directory kept."""
    from controller.lifecycle.activities import MODULE_DIRECTORY
    from controller.lifecycle.run_files import run_record

    kept = sorted((run_dir / MODULE_DIRECTORY).glob("*.py"))
    if len(kept) != 1:
        raise SetupError(
            f"{run_dir} keeps no module ({MODULE_DIRECTORY}/ holds {len(kept)} .py files)",
            reason="replay-module-missing",
            next_step="replay a run made by `society run`, which keeps its module",
        )
    recorded = run_record(run_dir.parent, run_id).get("module")
    if recorded and Path(recorded).is_file():
        if Path(recorded).read_bytes() == kept[0].read_bytes():
            return Path(recorded)
    return kept[0]


def _print(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
