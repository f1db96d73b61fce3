"""``society temporal status|stop``: the local Temporal dev server of an artifact root.

The dev server outlives its last run for ``SOCIETY_TEMPORAL_IDLE_S`` so that the next run finds
it ready; these commands show it and stop an idle one at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from controller.cli.run_commands import _add_artifacts, artifact_root


def add_commands(subparsers: Any) -> None:
    temporal = subparsers.add_parser(
        "temporal",
        help="the local Temporal dev server runs share: its state, or stop it when idle",
        description=(
            "The local profile's runs share one Temporal dev server per artifact root; it "
            "outlives the last run for SOCIETY_TEMPORAL_IDLE_S seconds (300 by default), so the "
            "next run finds it ready."
        ),
    )
    actions = temporal.add_subparsers(dest="temporal_command", required=True, metavar="ACTION")
    status = actions.add_parser(
        "status",
        help="one JSON line: the dev server's address and UI, the live runs holding it",
        description="Prints the dev server's pid, address, UI and live runs (or that none runs).",
    )
    _add_artifacts(status)
    status.set_defaults(handler=_status)
    stop = actions.add_parser(
        "stop",
        help="stop the dev server now, if no live run holds it",
        description=(
            "Stops the artifact root's dev server at once when no live run holds it; with live "
            "runs it stops nothing and exits 1 naming them."
        ),
    )
    _add_artifacts(stop)
    stop.set_defaults(handler=_stop)


def _status(args: argparse.Namespace) -> int:
    from controller.lifecycle.server import DevServer

    server = DevServer(artifact_root(args))
    endpoint = server.live_endpoint()
    line: dict[str, Any] = {"running": endpoint is not None}
    if endpoint is not None:
        line |= {
            "pid": endpoint.dev_server_pid,
            "address": endpoint.address,
            "ui": endpoint.ui_url,
            "liveRuns": server.live_runs(),
        }
    print(json.dumps(line))
    return 0


def _stop(args: argparse.Namespace) -> int:
    import anyio

    from controller.lifecycle.server import DevServer

    server = DevServer(artifact_root(args))
    endpoint = server.live_endpoint()
    live = anyio.run(lambda: server.reap(idle=True))
    pid = None if endpoint is None else endpoint.dev_server_pid
    print(json.dumps({"stopped": endpoint is not None and not live, "pid": pid, "liveRuns": live}))
    if live:
        print(
            f"society temporal stop: error: live runs hold the dev server: {', '.join(live)}\n"
            "  next step: wait for them to end (society status RUN_ID), or cancel them "
            "(society cancel RUN_ID)",
            file=sys.stderr,
        )
        return 1
    return 0
