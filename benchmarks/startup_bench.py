"""Start-up: submit -> readiness gate for N scripted agents, against a same-run baseline.

    .venv/bin/python benchmarks/startup_bench.py            # 10 and 100 agents, 3 rounds each
    .venv/bin/python benchmarks/startup_bench.py --agents 100 --rounds 5
    .venv/bin/python benchmarks/startup_bench.py --openclaw  # 1 and 5 OpenClaw agents, 1 round
    .venv/bin/python benchmarks/startup_bench.py --nanoclaw  # 1 and 5 NanoClaw agents

The run figure is the time from calling ``Run.execute`` to the program's first line (the gate
passed and the program was dispatched): ledger creation, router start, admission, N agent
processes spawned, their bridges attached and their router sessions authenticated. It is
measured with each agent in its bubblewrap sandbox and cgroups (the default) and unsandboxed
(``--unsandboxed``). The baseline is N Python interpreters started at once that import what the
agent entrypoint imports, and exit. Each round measures all three, back to back; the best round
of each is reported, and the ratio is the sandboxed run's over the baseline.

With ``--openclaw`` the roster is N OpenClaw agents (``controller.agents.openclaw``), and the
baseline is N bare ``openclaw gateway run`` processes started at once with the same headless
config, timed until each answers its RPC handshake. The run's figure also holds what an OpenClaw
agent needs beyond the bare gateway: the run's model service (the local model server and the
model gateway), the sandbox, the adapter and its relay, the bridge, the router session. Each
gateway holds ~730 MB, so the sizes that do not fit the free memory are skipped, and said so.

With ``--nanoclaw`` the roster is N NanoClaw agents, and the baseline is N bare Claude Agent SDK
processes (default options) started at once, timed until each sends its first request; it also
prints the first turn's prompt tokens (SDK defaults against the runtime's trimmed options) and
memory per agent (``nanoclaw_bench.py``).
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from controller.agents import RuntimeDescriptor, scripted
from controller.platforms.local import LocalCapacity, LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, RunSpec

AGENT_IMPORTS = "import agent_images.scripted.agent"
TARGET_RATIO = 1.5
OPENCLAW_MIB_PER_AGENT = 900
"""A gateway's ~730 MB plus its adapter, relay and headroom; what a size must find free."""


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


async def openclaw_baseline_s(agents: int, scratch: Path) -> float:
    """Start ``agents`` bare OpenClaw gateways at once; the time until every one answers."""
    from agent_images.openclaw.config import (
        GATEWAY_LOG,
        WORKSPACE_DIR,
        AgentOptions,
        openclaw_config,
    )
    from agent_images.openclaw.process import free_loopback_port, openclaw_gateway, wait_ready

    answered: list[float] = []
    started = time.perf_counter()

    async def one(index: int) -> None:
        workdir = Path(tempfile.mkdtemp(prefix=f"bare-{index}-", dir=scratch))
        (workdir / WORKSPACE_DIR).mkdir()
        (workdir / WORKSPACE_DIR / "IDENTITY.md").write_text("You are a bare gateway.\n")
        port, token = free_loopback_port(), secrets.token_urlsafe(24)
        config = openclaw_config(
            AgentOptions(),
            workdir=workdir,
            port=port,
            token=token,
            model_base_url="http://127.0.0.1:9/v1",  # never called: nothing asks for a turn
            model="none",
        )
        async with openclaw_gateway(workdir, config) as process:
            if not await wait_ready(process, port, token, timeout_s=600):
                log = (workdir / GATEWAY_LOG).read_text(errors="replace")[-3000:]
                raise SystemExit(f"a bare OpenClaw gateway exited ({process.returncode}):\n{log}")
            answered.append(time.perf_counter())

    async with anyio.create_task_group() as tasks:
        for index in range(agents):
            tasks.start_soon(one, index)
    return max(answered) - started


def openclaw_sizes(wanted: list[int]) -> list[int]:
    """The sizes whose gateways fit the memory free now (a baseline and a run never overlap)."""
    free_mib = _available_mib()
    fitting = [n for n in wanted if n * OPENCLAW_MIB_PER_AGENT <= free_mib]
    for n in sorted(set(wanted) - set(fitting)):
        print(
            f"{n} OpenClaw agents need ~{n * OPENCLAW_MIB_PER_AGENT} MiB; {free_mib} MiB are free: "
            f"skipped",
            flush=True,
        )
    if len(fitting) < len(wanted):
        most = free_mib // OPENCLAW_MIB_PER_AGENT
        if most >= 1 and most not in fitting:
            fitting.append(most)
            print(f"measuring {most} OpenClaw agents instead, the most that fit", flush=True)
    return fitting


def _available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise SystemExit("cannot read MemAvailable from /proc/meminfo")


async def run_to_gate_s(
    agents: int, artifact_root: Path, sandboxed: bool, runtime: str = "scripted"
) -> float:
    dispatched: list[float] = []

    async def execute(ctx: RunContext) -> None:
        dispatched.append(time.perf_counter())

    spec = RunSpec.define(
        id="bench.startup/v1",
        agents={f"agent-{i}": _agent(runtime, i) for i in range(agents)},
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


def _agent(runtime: str, index: int) -> RuntimeDescriptor:
    if runtime == "openclaw":
        from controller.agents.openclaw import openclaw

        return openclaw(f"You are agent {index}.", ready_timeout_s=900)
    if runtime == "nanoclaw":
        from controller.agents.nanoclaw import nanoclaw

        return nanoclaw(f"You are agent {index}.")
    return scripted()


def openclaw_main(sizes: list[int], rounds: int) -> None:
    """N OpenClaw agents to the gate against N bare gateways, interleaved, best of ``rounds``."""
    results = []
    with tempfile.TemporaryDirectory(prefix="startup-bench-openclaw-") as scratch:
        for agents in openclaw_sizes(sizes):
            runs, baselines = [], []
            for _ in range(rounds):
                baselines.append(anyio.run(openclaw_baseline_s, agents, Path(scratch)))
                runs.append(anyio.run(run_to_gate_s, agents, Path(scratch), True, "openclaw"))
            run, baseline = min(runs), min(baselines)
            results.append(
                {
                    "runtime": "openclaw",
                    "agents": agents,
                    "submitToGateS": round(run, 3),
                    "bareGatewaysS": round(baseline, 3),
                    "ratio": round(run / baseline, 2),
                    "rounds": rounds,
                    "allRunsS": [round(x, 3) for x in runs],
                    "allBaselinesS": [round(x, 3) for x in baselines],
                }
            )
            print(json.dumps(results[-1]), flush=True)
    for result in results:
        print(
            f"{result['agents']} OpenClaw agents to the gate: {result['submitToGateS']} s; "
            f"{result['agents']} bare gateways: {result['bareGatewaysS']} s; "
            f"ratio {result['ratio']}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, action="append", help="roster sizes (10 and 100)")
    parser.add_argument("--rounds", type=int, help="rounds per size (3; 1 with --openclaw)")
    parser.add_argument(
        "--openclaw", action="store_true", help="OpenClaw agents (1 and 5) vs bare gateways"
    )
    parser.add_argument(
        "--nanoclaw", action="store_true", help="NanoClaw agents (1 and 5) vs bare SDK processes"
    )
    args = parser.parse_args()
    if args.nanoclaw:
        from nanoclaw_bench import nanoclaw_main

        with tempfile.TemporaryDirectory(prefix="startup-bench-nanoclaw-") as scratch:
            nanoclaw_main(args.agents or [1, 5], run_to_gate_s, Path(scratch))
        return
    if args.openclaw:
        openclaw_main(args.agents or [1, 5], args.rounds or 1)
        return
    args.rounds = args.rounds or 3
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
