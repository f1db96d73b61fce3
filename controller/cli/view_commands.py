"""``society view`` (a run's replay page) and ``society serve`` (the live view)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from controller.cli.run_commands import ARTIFACTS_ENV, artifact_root
from controller.settings import DEFAULT_ARTIFACTS


def add_commands(subparsers: Any) -> None:
    view = subparsers.add_parser(
        "view",
        help="write a run's replay page, or a suite's page: self-contained HTML",
        description=(
            "RUN_DIR: verifies the run's ledger and writes one HTML file that opens from disk "
            "with no network: lanes per agent and endpoint, messages with latency, link faults, "
            "readiness, dispatch, outcome, usage and cost, the verification result, filters "
            "and search. SUITE_DIR (a folder `society suite run` made): writes the suite's "
            "leaderboard, a plot per grader field across runs and seeds, and a row per run "
            "linking to its replay page, written beside it in <page name>-runs/; every ledger "
            "is verified again and one that fails is shown so."
        ),
    )
    view.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="artifacts/sr-..., a ledger, or a suite's folder DIR/<suite id>",
    )
    view.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="where to write the page (default replay.html, suite.html for a suite)",
    )
    view.add_argument(
        "--trusted-key",
        type=Path,
        metavar="FILE",
        help="public key the ledgers must be signed by (the badge then says pinned)",
    )
    view.add_argument(
        "--suite",
        type=Path,
        metavar="SUITE.py",
        help=(
            "a suite's folder only: recompute its rankings from the ledgers with this module "
            "(as `suite verify` does) instead of showing suite.json's"
        ),
    )
    view.set_defaults(handler=_view)

    serve = subparsers.add_parser(
        "serve",
        help="serve the runs under the artifact root on 127.0.0.1, live",
        description=(
            "Serves a page listing the runs under DIR, a live page per running run, the replay "
            "page per finished run, and DIR/<run>.json. Every URL needs the random token in the "
            "printed URL (403 otherwise). It never writes to a run."
        ),
    )
    serve.add_argument(
        "--artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"artifact root (default: ${ARTIFACTS_ENV}, else ./{DEFAULT_ARTIFACTS})",
    )
    serve.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free)")
    serve.set_defaults(handler=_serve)


def _view(args: argparse.Namespace) -> int:
    from controller.viewer.page import render_page
    from controller.viewer.records import read_run
    from controller.viewer.suite_page import is_suite_folder
    from ledger import LedgerError
    from ledger.signing import load_trusted_key

    if is_suite_folder(args.run_dir):
        return _view_suite(args)
    if args.suite is not None:
        print(
            f"society view: error: --suite needs a suite's folder; {args.run_dir} is none",
            file=sys.stderr,
        )
        return 2
    output = args.output or Path("replay.html")
    try:
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        run = read_run(args.run_dir, trusted_key=trusted)
    except LedgerError as exc:
        print(json.dumps({"written": False, "reason": exc.reason, "detail": exc.detail}))
        return 1
    from controller.suites.layout import write_atomically

    write_atomically(output, render_page(run))  # a page appears whole or not at all
    print(
        json.dumps(
            {
                "written": str(output),
                "records": len(run.records.rows),
                "verification": run.verification["status"],
                "bytes": output.stat().st_size,
            }
        )
    )
    return 0 if run.verification["status"] != "failed" else 1


def _view_suite(args: argparse.Namespace) -> int:
    from controller.suites.definition import SuiteError
    from controller.viewer.suite_page import write_suite_page
    from ledger import LedgerError
    from ledger.signing import load_trusted_key

    try:
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        written = write_suite_page(
            args.run_dir, args.output or Path("suite.html"), trusted_key=trusted, module=args.suite
        )
    except (SuiteError, LedgerError) as exc:
        print(json.dumps({"written": False, "reason": exc.reason, "detail": str(exc)}))
        return 1
    print(json.dumps(written.as_json()))
    return 0 if written.failed == 0 else 1


def _serve(args: argparse.Namespace) -> int:
    from controller.viewer.server import serve

    root = artifact_root(args)
    if not root.is_dir():
        print(
            f"society serve: error: {root} is not a directory (pass --artifacts DIR)",
            file=sys.stderr,
        )
        return 2
    code: int = serve(root, port=args.port)
    return code
