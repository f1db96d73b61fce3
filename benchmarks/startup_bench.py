"""Start-up: submit -> readiness gate for N scripted agents, against a same-run baseline.

    .venv/bin/python benchmarks/startup_bench.py            # 10 and 100 agents, 3 rounds each
    .venv/bin/python benchmarks/startup_bench.py --agents 100 --rounds 5

The run figure is the time from calling ``Run.execute`` to the program's first line (the gate
passed and the program was dispatched): ledger creation, router start, admission, N agent
processes spawned, their bridges attached and their router sessions authenticated. It is
measured with each agent in its bubblewrap sandbox and cgroups (the default) and unsandboxed
(``--unsandboxed``). The baseline is N Python interpreters started at once that import what the
agent entrypoint imports, and exit. Each round measures all three, back to back; the best round
of each is reported, and the ratio is the sandboxed run's over the baseline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from controller.agents import scripted
from controller.platform.local import LocalCapacity, LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, RunSpec

AGENT_IMPORTS = "import agent_images.scripted.agent"
TARGET_RATIO = 1.5


def baseline_s(agents: int) -> float:
    """Start ``agents`` interpreters at once that import the agent program; wait for all.

    Each leads its own session, as agents do: with the scheduler's autogroups (on by default)
    a session is one scheduling group, so anything else would starve the baseline on a busy
    machine and flatter the kernel.
    """
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", AGENT_IMPORTS],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(agents)
    ]
    for process in processes:
        if process.wait() != 0:
            raise SystemExit(f"the baseline interpreter failed with {process.returncode}")
    return time.perf_counter() - started


async def run_to_gate_s(agents: int, artifact_root: Path, sandboxed: bool) -> float:
    dispatched: list[float] = []

    async def execute(ctx: RunContext) -> None:
        dispatched.append(time.perf_counter())

    spec = RunSpec.define(
        id="bench.startup/v1",
        agents={f"agent-{i}": scripted() for i in range(agents)},
        execute=execute,
    )
    budget = LocalCapacity.detect()
    platform = LocalPlatform(
        LocalCapacity(cpu=max(budget.cpu, agents), memory_mib=budget.memory_mib, agents=agents),
        sandboxed=sandboxed,
    )
    started = time.perf_counter()
    outcome = await Run.execute(spec, platform=platform, artifact_root=artifact_root)
    if not isinstance(outcome, ProgramFinished) or not dispatched:
        raise SystemExit(f"the run did not reach its program: {outcome}")
    return dispatched[0] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, action="append", help="roster sizes (10 and 100)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = args.agents or [10, 100]
    results = []
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        for agents in sizes:
            runs, plain, baselines = [], [], []
            for _ in range(args.rounds):
                baselines.append(baseline_s(agents))
                runs.append(anyio.run(run_to_gate_s, agents, Path(scratch), True))
                plain.append(anyio.run(run_to_gate_s, agents, Path(scratch), False))
            run, unsandboxed, baseline = min(runs), min(plain), min(baselines)
            results.append(
                {
                    "agents": agents,
                    "submitToGateS": round(run, 3),
                    "unsandboxedSubmitToGateS": round(unsandboxed, 3),
                    "baselineS": round(baseline, 3),
                    "ratio": round(run / baseline, 2),
                    "unsandboxedRatio": round(unsandboxed / baseline, 2),
                    "rounds": args.rounds,
                    "allRunsS": [round(x, 3) for x in runs],
                    "allUnsandboxedRunsS": [round(x, 3) for x in plain],
                    "allBaselinesS": [round(x, 3) for x in baselines],
                }
            )
            print(json.dumps(results[-1]), flush=True)
    largest = max(results, key=lambda r: r["agents"])
    verdict = "meets" if largest["ratio"] <= TARGET_RATIO else "misses"
    ratio = largest["ratio"]
    print(
        f"{largest['agents']} sandboxed agents: {ratio}x the baseline ({verdict} <= "
        f"{TARGET_RATIO}x); unsandboxed: {largest['unsandboxedRatio']}x"
    )


if __name__ == "__main__":
    main()
