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
        help="write a run's replay page: one self-contained HTML file",
        description=(
            "Verifies RUN_DIR's ledger and writes one HTML file that opens from disk with no "
            "network: lanes per agent and endpoint, messages with latency, link faults, "
            "readiness, dispatch, outcome, usage and cost, the verification result, filters "
            "and search."
        ),
    )
    view.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="artifacts/sr-... or a ledger")
    view.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("replay.html"),
        metavar="FILE",
        help="where to write the page (default replay.html)",
    )
    view.add_argument(
        "--trusted-key",
        type=Path,
        metavar="FILE",
        help="public key the ledger must be signed by (the badge then says pinned)",
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
    from ledger import LedgerError
    from ledger.signing import load_trusted_key

    try:
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        run = read_run(args.run_dir, trusted_key=trusted)
    except LedgerError as exc:
        print(json.dumps({"written": False, "reason": exc.reason, "detail": exc.detail}))
        return 1
    from controller.suites.layout import write_atomically

    write_atomically(args.output, render_page(run))  # a page appears whole or not at all
    print(
        json.dumps(
            {
                "written": str(args.output),
                "records": len(run.records.rows),
                "verification": run.verification["status"],
                "bytes": args.output.stat().st_size,
            }
        )
    )
    return 0 if run.verification["status"] != "failed" else 1


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
