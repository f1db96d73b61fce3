"""Start-up: submit -> readiness gate for N scripted agents, against a same-run baseline.

    .venv/bin/python benchmarks/startup_bench.py            # 10 and 100 agents, 3 rounds each
    .venv/bin/python benchmarks/startup_bench.py --agents 100 --rounds 5
    .venv/bin/python benchmarks/startup_bench.py --openclaw  # 1 and 5 OpenClaw agents, 1 round
    .venv/bin/python benchmarks/startup_bench.py --nanoclaw  # 1 and 5 NanoClaw agents
    .venv/bin/python benchmarks/startup_bench.py --breakdown  # where one agent's start goes
    .venv/bin/python benchmarks/startup_bench.py --agents 500 --template-only  # no bwrap runs

``--breakdown`` starts one process at a time (median of 15) for each step of a bubblewrap
agent's start (bwrap with its keyring step around ``/bin/true``; a bare interpreter; one that
imports the agent program, bare and in the sandbox) and, beside them, a fork of this
interpreter after it imported the agent program, each over the sandboxed import-matched start.

The run figure is the time from calling ``Run.execute`` to the program's first line (the gate
passed and the program was dispatched): ledger creation, router start, admission, N agent
processes spawned, their bridges attached and their router sessions authenticated. It is
measured with each agent in its bubblewrap sandbox and cgroups (the default), unsandboxed
(``--unsandboxed``), and (as root) forked from a pre-imported template into the same sandbox
(``SOCIETY_LOCAL_TEMPLATE=1``). The baseline is N Python interpreters started at once that import
what the agent entrypoint imports, and exit. Each round measures all four, back to back; the best
round of each is reported, and each ratio is that run's over the baseline. At the gate, each
sandboxed run also reads the proportional set size (``/proc/<pid>/smaps_rollup``) of every process
that carries the run's mark (the template included), per agent; beside it, the benchmark prints
the same for idle interpreters: bare ones and ones that imported the agent program.

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
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from controller.agents import RuntimeDescriptor, scripted
from controller.platforms.local import LocalCapacity, LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, RunSpec

AGENT_IMPORTS = "import agent_images.scripted.agent"
TARGET_RATIO = 1.5
TEMPLATE_TARGET_RATIO = 0.3
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
    from agent_images.openclaw.process import free_loopback_port, openclaw_gateway, wait_ready
    from society_sandbox.runtimes.openclaw import (
        GATEWAY_LOG,
        WORKSPACE_DIR,
        AgentOptions,
        openclaw_config,
    )

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


def pss_kib(pid: int) -> int:
    """The process's proportional set size, or 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_pss_kib(run_id: str) -> int:
    """The summed proportional set size of every process that carries the run's mark."""
    mark = f"SOCIETY_RUN_ID={run_id}".encode()
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                carries = mark in (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            total += pss_kib(int(entry.name)) if carries else 0
    return total


def idle_interpreters_pss_kib(count: int, imports: str) -> float:
    """Mean PSS of ``count`` idle interpreters that ran ``imports`` (alive at once)."""
    code = f"import sys; {imports}; print('ready', flush=True); sys.stdin.read()"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(count)
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        return sum(pss_kib(p.pid) for p in processes) / count
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
            process.wait()


async def run_to_gate_s(
    agents: int,
    artifact_root: Path,
    sandboxed: bool,
    runtime: str = "scripted",
    *,
    template: bool = False,
    memory: list[float] | None = None,
) -> float:
    dispatched: list[float] = []

    async def execute(ctx: RunContext) -> None:
        dispatched.append(time.perf_counter())
        if memory is not None:
            memory.append(await anyio.to_thread.run_sync(run_pss_kib, ctx.ledger.run_id) / agents)

    roster = {f"agent-{i}": _agent(runtime, i) for i in range(agents)}
    spec = RunSpec.define(id="bench.startup/v1", agents=roster, execute=execute)
    budget = LocalCapacity.detect()
    # The roster's requests are admission figures, not what idle agents use: widen the budget
    requested_mib = sum(d.resources.memory_mib for d in roster.values())
    platform = LocalPlatform(
        LocalCapacity(
            cpu=max(budget.cpu, agents),
            memory_mib=max(budget.memory_mib, requested_mib),
            agents=agents,
        ),
        sandboxed=sandboxed,
        template=template,
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


def breakdown(rounds: int = 15) -> None:
    """Median wall time of each step of one agent's start, one process at a time."""
    from controller.platforms.local.launch import fresh_session_keyring
    from controller.platforms.local.sandbox import (
        FIRST_AGENT_UID,
        Bubblewrap,
        python_executable,
        seal,
    )

    bwrap, python = Bubblewrap.probe(), python_executable()
    with tempfile.TemporaryDirectory(prefix="startup-breakdown-") as scratch:
        os.chmod(scratch, 0o777)

        def sandboxed(*inner: str) -> float:
            sealed = seal(bwrap, inner, workdir=Path(scratch), sockets=(), uid=FIRST_AGENT_UID)
            try:
                return _timed(fresh_session_keyring(sealed.argv), pass_fds=sealed.fds)
            finally:
                sealed.close()

        steps = {
            "bwrap and its keyring step around /bin/true": lambda: sandboxed("/bin/true"),
            "python -c pass": lambda: _timed([python, "-c", "pass"]),
            "python importing the agent program": lambda: _timed([python, "-c", AGENT_IMPORTS]),
            "the same in the sandbox": lambda: sandboxed(python, "-c", AGENT_IMPORTS),
            "a fork of an interpreter that imported it": _fork_s,
        }
        medians = {
            name: statistics.median(step() for _ in range(rounds)) for name, step in steps.items()
        }
    whole = medians["the same in the sandbox"]
    for name, seconds in medians.items():
        print(f"{name}: {seconds * 1000:.1f} ms ({seconds / whole:.2f}x the sandboxed start)")


def _timed(argv: list[str], pass_fds: tuple[int, ...] = ()) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, pass_fds=pass_fds)
    return time.perf_counter() - started


def _fork_s() -> float:
    import agent_images.scripted.agent  # noqa: F401 (what the template holds)

    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return time.perf_counter() - started


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
    parser.add_argument("--breakdown", action="store_true", help="where one agent's start goes")
    parser.add_argument(
        "--template-only",
        action="store_true",
        help="only the template's runs beside the baseline (rosters bwrap cannot start in time)",
    )
    args = parser.parse_args()
    if args.breakdown:
        breakdown()
        return
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
    results = [
        startup_round(agents, args.rounds, template_only=args.template_only) for agents in sizes
    ]
    bare = idle_interpreters_pss_kib(10, "pass")
    imported = idle_interpreters_pss_kib(10, AGENT_IMPORTS)
    print(
        f"memory per idle interpreter (PSS, 10 alive at once): bare {bare / 1024:.1f} MiB; "
        f"having imported the agent program {imported / 1024:.1f} MiB"
    )
    largest = max(results, key=lambda r: r["agents"])
    if "ratio" in largest:
        verdict = "meets" if largest["ratio"] <= TARGET_RATIO else "misses"
        ratio = largest["ratio"]
        print(
            f"{largest['agents']} sandboxed agents: {ratio}x the baseline ({verdict} <= "
            f"{TARGET_RATIO}x); unsandboxed: {largest['unsandboxedRatio']}x; PSS per idle "
            f"agent {largest['bwrapPssMiB']} MiB"
        )
    if "templateRatio" in largest:
        verdict = "meets" if largest["templateRatio"] <= TEMPLATE_TARGET_RATIO else "misses"
        print(
            f"{largest['agents']} agents forked from a template: {largest['templateRatio']}x the "
            f"baseline ({verdict} <= {TEMPLATE_TARGET_RATIO}x); PSS per idle agent "
            f"{largest['templatePssMiB']} MiB"
        )


def startup_round(agents: int, rounds: int, *, template_only: bool) -> dict[str, Any]:
    """``rounds`` rounds of the baseline and each way to start the roster; the best of each."""
    forks = os.geteuid() == 0  # a template forks sandboxed agents only as root
    runs, plain, baselines, templated = [], [], [], []
    bwrap_pss: list[float] = []
    template_pss: list[float] = []
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        root = Path(scratch)
        for _ in range(rounds):
            baselines.append(baseline_s(agents))
            if not template_only:
                measure = partial(run_to_gate_s, agents, root, True, memory=bwrap_pss)
                runs.append(anyio.run(measure))
                plain.append(anyio.run(run_to_gate_s, agents, root, False))
            if forks:
                measure = partial(
                    run_to_gate_s, agents, root, True, template=True, memory=template_pss
                )
                templated.append(anyio.run(measure))
    baseline = min(baselines)
    result: dict[str, Any] = {
        "agents": agents,
        "baselineS": round(baseline, 3),
        "rounds": rounds,
        "allBaselinesS": [round(x, 3) for x in baselines],
    }
    if runs:
        run, unsandboxed = min(runs), min(plain)
        result |= {
            "submitToGateS": round(run, 3),
            "unsandboxedSubmitToGateS": round(unsandboxed, 3),
            "ratio": round(run / baseline, 2),
            "unsandboxedRatio": round(unsandboxed / baseline, 2),
            "bwrapPssMiB": round(min(bwrap_pss) / 1024, 1),
            "allRunsS": [round(x, 3) for x in runs],
            "allUnsandboxedRunsS": [round(x, 3) for x in plain],
        }
    if templated:
        result |= {
            "templateSubmitToGateS": round(min(templated), 3),
            "templateRatio": round(min(templated) / baseline, 2),
            "templatePssMiB": round(min(template_pss) / 1024, 1),
            "allTemplateRunsS": [round(x, 3) for x in templated],
        }
        if runs:
            result["templateOverBwrap"] = round(min(templated) / min(runs), 2)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
