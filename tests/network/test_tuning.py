"""Process tuning is the entry point's explicit choice: a router changes no process-wide setting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, sys, tempfile
from pathlib import Path
import anyio
sys.path.insert(0, "tests/network")
from network_support import make_ledger
from controller.network.router import Router

def settings():
    return {"threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count(),
            "switch": sys.getswitchinterval()}

async def serve_once():
    with tempfile.TemporaryDirectory() as directory:
        async with make_ledger(Path(directory) / "ledger") as ledger:
            async with Router.serve(ledger) as router:
                router.register("alice")

before = settings()
anyio.run(serve_once)
served = settings()
if sys.argv[1:] == ["--tune"]:
    from controller.network.tuning import tune_for_router
    tune_for_router()
print(json.dumps({"before": before, "served": served, "after": settings()}))
"""


def _probe(*argv: str) -> dict[str, dict[str, float]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, float]] = json.loads(done.stdout)
    return result


def test_serving_a_router_leaves_the_collector_and_the_gil_as_the_process_set_them() -> None:
    seen = _probe()
    assert seen["served"]["threshold"] == seen["before"]["threshold"]
    assert seen["served"]["switch"] == seen["before"]["switch"]
    assert seen["served"]["frozen"] == seen["before"]["frozen"] == 0


def test_the_entry_points_tuning_freezes_the_heap_and_shortens_the_switch_interval() -> None:
    seen = _probe("--tune")
    assert seen["after"]["frozen"] > 1000
    assert seen["after"]["threshold"] >= 10_000
    assert seen["after"]["switch"] < seen["before"]["switch"]
