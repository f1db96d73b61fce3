"""``society ledger export-inspect RUN_DIR|SUITE_DIR -o FILE.eval``: a run or a suite as an Inspect
AI log, for ``inspect view``, ``read_eval_log`` and Inspect's dataframes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_export_inspect(commands: Any) -> None:
    export = commands.add_parser(
        "export-inspect",
        help="write a run or a suite as an Inspect AI log (inspect view, read_eval_log)",
        description=(
            "Verifies every ledger (and re-hashes every harvested file), then writes one Inspect "
            "log with inspect_ai's own API: one sample per agent of a run, per run and agent of "
            "a suite; each agent's numbers from the grader as its sample's scores, the run's own "
            "and mean/stderr per field in the log's results. Needs the inspect extra "
            "(pip install 'society-runner[inspect]'). Prints one JSON line."
        ),
    )
    export.add_argument(
        "source", type=Path, metavar="RUN_DIR|SUITE_DIR", help="a run, ledger or suite directory"
    )
    export.add_argument(
        "-o", "--output", type=Path, required=True, metavar="FILE.eval", help="the log to write"
    )
    export.add_argument(
        "--grader", type=Path, default=None, metavar="GRADER.py", help="score each run with it"
    )
    export.add_argument(
        "--trusted-key", default=None, metavar="FILE", help="the key every ledger must be signed by"
    )
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from controller.viewer.inspect_log import export_inspect
    from ledger.signing import load_trusted_key

    trusted = None if args.trusted_key is None else load_trusted_key(args.trusted_key)
    written = export_inspect(args.source, args.output, grader=args.grader, trusted_key=trusted)
    print(json.dumps(written))
    return 0
