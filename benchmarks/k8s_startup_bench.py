"""Submit -> readiness gate on the kubernetes platform in real pods on kind, beside the local
profile and KWOK, same run, with kind's time split into phases.

    sudo nice .venv/bin/python benchmarks/k8s_startup_bench.py [--agents 5 10] [--rounds 1]

Starts a kind cluster as the real-pod tests make theirs (tests/kubernetes/kind_plane.py), named
``society-kind-bench`` so that it runs beside them: kind on the node image built here, Kueue and
Agent Sandbox from scripts/build-kind-addon-images.sh, the images of scripts/build-images.sh
imported into the agents' node (needs root, podman and the builds), with the KWOK controller
deployed into it and one fake node (tests/kubernetes/kind_kwok.py); a ClusterQueue, then for each
roster size runs a scripted society:

- on kind: Kueue admission, one Sandbox per agent, each a pod from the scripted image on the
  agents' node (the controller is this process, which the pods reach at the gateway of the
  cluster's podman network); submit -> the program's first line (the gate passed), and the
  phases, each ending when the roster's last agent got there, as this process saw them through
  watches: Workload admitted, every pod created (Agent Sandbox), every agent container running
  (the kubelet: sandbox, CNI, container start; image pulls are counted from the kubelet's
  ``Pulled`` events: the images were imported into containerd when the cluster was made), every
  agent ready (its program booted in the container, its bridge attached and its router session
  authenticated: the controller's "agents ready" progress), the gate passed;
- on KWOK: the same roster placed on the fake node by the platform's node selector and
  toleration; its pods run nothing, so no gate can pass: submit -> admitted -> every pod
  Running, then the run is cancelled (their fake addresses route off this machine, so their
  bridges are dialled at a loopback port that refuses);
- on the local profile: submit -> gate.

Best of ``--rounds`` by submit -> gate (KWOK: by submit -> pods Running). Not a test.

``--warm`` measures warm pools instead of KWOK: for each size, a SandboxWarmPool of the roster's
shape (controller/platforms/kubernetes/warm.py) is scaled to that many sandboxes and waited
ready, the roster runs claiming them (warm), the pool is scaled to 0, the same roster runs with
every Sandbox made for it (cold), then on the local profile: submit -> gate for each, and each
run's count of agents the ledger records as started warm.

At the gate, what the roster's pods use on the agents' node, read from their cgroups (v1; the
node's container shares this machine's kernel) and ``/proc``: memory per agent pod (the resident
set of its processes summed, their proportional set, and the cgroup's anonymous memory) and CPU
per pod over ``SAMPLE_S`` idle seconds; and the controller's (this process's) resident set.
``--cpu-request`` gives the roster's agent containers a CPU request other than the scripted
runtime's (``SCRIPTED_RESOURCES``): the scheduler places pods by requests, so on this 2-core
machine the default's arithmetic, not the pods' use, decides how many fit. A size whose kind run
fails is reported with the run's cause (a pod no node takes carries the scheduler's verdict) and
ends the sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kubernetes"))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))  # after the repository's
# own packages: tests/ledger would shadow ``ledger``

from cluster_support import PINNED, SCRIPTED, make_cluster_queue, settings
from cp_build import build_images
from cp_images import Images
from kind_kwok import KwokPlane, NodeCapacity, start_kwok
from kind_plane import KindPlane

from controller import Run, RunSpec
from controller.agents import Resources, scripted
from controller.agents.scripted import SCRIPTED_RESOURCES
from controller.events.run import AgentRuntimeReady
from controller.platforms.kubernetes import Kube, KubernetesPlatform, objects, warm
from controller.platforms.kubernetes import sandbox as observed
from controller.platforms.kubernetes.kube import Informer, Obj, is_true
from controller.platforms.local import LocalPlatform
from controller.run import PlatformLost, ProgramFinished, RunContext
from controller.run.progress import Counter
from controller.run.runid import new_run_id
from ledger import open_ledger_artifacts

PHASES = ("admitted", "pods created", "containers running", "agents ready", "gate")
SAMPLE_S = 5.0
"""Seconds over which the pods' CPU use is sampled at the gate (every agent idle then)."""
MIB = 1024 * 1024


@dataclass
class Timeline:
    """When the roster's last agent reached each milestone, seconds after submit."""

    submitted: float = field(default_factory=time.monotonic)
    at: dict[str, float] = field(default_factory=dict)
    pulled: list[str] = field(default_factory=list)
    """The kubelet's ``Pulled`` messages (``already present`` when nothing was pulled)."""

    running: anyio.Event = field(default_factory=anyio.Event)
    unschedulable: dict[str, str] = field(default_factory=dict)
    """Pods the scheduler could not place, as this process's watch saw them: its last verdict."""
    usage: Usage | None = None
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The machine's load averages at the gate (or when the run ended)."""
    ended: str = ""
    """Why a KWOK run ended before every pod ran."""
    starts: dict[str, int] = field(default_factory=dict)
    """How many agents the ledger records as started ``warm`` and ``cold``."""

    def mark(self, milestone: str) -> None:
        self.at.setdefault(milestone, time.monotonic() - self.submitted)
        if milestone == "containers running":
            self.running.set()

    def phases(self) -> list[tuple[str, float]]:
        """Each milestone's share: the time from the one before."""
        previous, shares = 0.0, []
        for name in PHASES:
            if name in self.at:
                shares.append((name, self.at[name] - previous))
                previous = self.at[name]
        return shares


class ReadyProgress:
    """A ``Progress`` (what the CLI renders) noting when the last agent became ready."""

    def __init__(self, timeline: Timeline, agents: int) -> None:
        self.timeline, self.agents = timeline, agents

    def phase(self, text: str) -> None:
        return None

    def counter(self, label: str, total: int) -> Counter:
        timeline, count = self.timeline, [0]

        class Count:
            def advance(self, n: int = 1) -> None:
                count[0] += n
                if label == "agents ready" and count[0] >= total:
                    timeline.mark("agents ready")

            def close(self) -> None:
                return None

        return Count()


@dataclass(frozen=True)
class Roster:
    """How each of the benchmark's scripted agents is declared."""

    resources: Resources = SCRIPTED_RESOURCES
    ready_timeout_s: float = 60.0


def spec_for(
    agents: int, execute: Callable[[RunContext], Any], image: str, roster: Roster
) -> RunSpec:
    agent = scripted(
        image=image, resources=roster.resources, ready_timeout_s=roster.ready_timeout_s
    )
    return RunSpec.define(
        id="bench.k8s-startup/v1",
        agents={f"agent-{i:03d}": agent for i in range(agents)},
        execute=execute,
    )


@dataclass(frozen=True)
class Usage:
    """What the roster's pods used on kind's agents' node at the gate, per pod (mean, max), and the
    controller's resident set."""

    pods: int
    rss_mib: tuple[float, float]
    """The resident set of the pod's processes, summed (shared pages counted in each)."""
    pss_mib: tuple[float, float]
    """Their proportional set size, summed (shared pages split among their users)."""
    anon_mib: tuple[float, float]
    """The pod cgroup's anonymous memory (``total_rss`` of memory.stat)."""
    processes: int
    cpu_millicores: tuple[float, float]
    """CPU used over ``SAMPLE_S`` seconds at the gate (cpuacct.usage)."""
    controller_rss_mib: float
    available_mib: float
    """The machine's MemAvailable at the gate."""


def _cgroup_dirs(hierarchy: str, uids: set[str]) -> dict[str, Path]:
    """Each pod's cgroup directory in this machine's ``hierarchy``: the kubelet in kind's node
    names it ``kubepods-<class>-pod<uid with underscores>.slice`` (its systemd driver)."""
    wanted = {f"pod{uid.replace('-', '_')}.slice": uid for uid in uids}
    found: dict[str, Path] = {}
    for path, dirs, _ in os.walk(Path("/sys/fs/cgroup") / hierarchy):
        for name in dirs:
            uid = wanted.get(name.rsplit("-", 1)[-1])
            if uid is not None:
                found[uid] = Path(path) / name
        if len(found) == len(wanted):
            break
    return found


def _procs(cgroup: Path) -> list[int]:
    return [int(pid) for procs in cgroup.rglob("cgroup.procs") for pid in procs.read_text().split()]


def _kib(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:  # the process ended
        pass
    return 0


def _stat(path: Path, key: str) -> int:
    for line in (path / "memory.stat").read_text().splitlines():
        name, value = line.split()
        if name == key:
            return int(value)
    return 0


def _spread(values: list[float]) -> tuple[float, float]:
    return (sum(values) / len(values), max(values)) if values else (0.0, 0.0)


def measure_usage(uids: set[str]) -> Usage:
    """Read the pods' memory, then their CPU over ``SAMPLE_S`` (blocking; run in a thread)."""
    memory = _cgroup_dirs("memory", uids)
    cpu = _cgroup_dirs("cpuacct", uids)
    rss, pss, anon, processes = [], [], [], 0
    for cgroup in memory.values():
        pids = _procs(cgroup)
        processes += len(pids)
        rss.append(sum(_kib(f"/proc/{pid}/status", "VmRSS") for pid in pids) / 1024)
        pss.append(sum(_kib(f"/proc/{pid}/smaps_rollup", "Pss") for pid in pids) / 1024)
        anon.append(_stat(cgroup, "total_rss") / MIB)
    before = {uid: int((path / "cpuacct.usage").read_text()) for uid, path in cpu.items()}
    started = time.monotonic()
    time.sleep(SAMPLE_S)
    elapsed = time.monotonic() - started
    used = [
        (int((cpu[uid] / "cpuacct.usage").read_text()) - ns) / 1e6 / elapsed
        for uid, ns in before.items()
    ]
    return Usage(
        pods=len(memory),
        rss_mib=_spread(rss),
        pss_mib=_spread(pss),
        anon_mib=_spread(anon),
        processes=processes,
        cpu_millicores=_spread(used),
        controller_rss_mib=_kib("/proc/self/status", "VmRSS") / 1024,
        available_mib=_kib("/proc/meminfo", "MemAvailable") / 1024,
    )


def _agent_running(pod: Obj) -> bool:
    """The agent container runs (KWOK: its fake status says so, or the pod is Running)."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == objects.AGENT_CONTAINER:
            return bool((status.get("state") or {}).get("running"))
    return pod.get("status", {}).get("phase") == "Running"


async def watch(kube: Kube, run_id: str, agents: int, timeline: Timeline) -> None:
    """Mark admitted, every pod created, every agent container running (until cancelled)."""
    selector = objects.run_selector(run_id)
    workloads = Informer(kube, "Workload", run_id, label_selector=selector)
    pods = Informer(kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=agent")

    def check(_: Informer) -> None:
        if any(is_true(w, "Admitted") for w in workloads.objects.values()):
            timeline.mark("admitted")
        for name, pod in pods.objects.items():
            verdict = observed.unschedulable(pod)
            if verdict is not None:
                timeline.unschedulable[name] = verdict
            else:
                timeline.unschedulable.pop(name, None)
        if len(pods.objects) >= agents:
            timeline.mark("pods created")
            if all(_agent_running(pod) for pod in pods.objects.values()):
                timeline.mark("containers running")

    async with anyio.create_task_group() as tasks:
        for informer in (workloads, pods):
            tasks.start_soon(informer.run)
            tasks.start_soon(informer.until, check)


class KindRunFailed(Exception):
    """The run on kind did not pass its gate: its cause, and what the watch saw."""

    def __init__(self, agents: int, detail: str, timeline: Timeline) -> None:
        super().__init__(f"{agents} agents: {detail}")
        self.timeline = timeline


async def on_kind(
    plane: KindPlane,
    queue: str,
    agents: int,
    root: Path,
    roster: Roster,
    startup_s: float,
    *,
    warm_pools: bool = False,
) -> Timeline:
    run_id = new_run_id()
    timeline = Timeline()
    core = _core(plane)

    async def execute(ctx: RunContext) -> None:
        timeline.mark("gate")
        timeline.load = os.getloadavg()
        events = await anyio.to_thread.run_sync(
            lambda: core.list_namespaced_event(run_id, field_selector="reason=Pulled").items
        )
        timeline.pulled = [event.message or "" for event in events]
        pods = await anyio.to_thread.run_sync(
            lambda: core.list_namespaced_pod(run_id, label_selector=f"{objects.ROLE_LABEL}=agent")
        )
        uids = {pod.metadata.uid for pod in pods.items}
        timeline.usage = await anyio.to_thread.run_sync(measure_usage, uids)

    platform = KubernetesPlatform(
        settings(plane, cluster_queue=queue, startup_timeout_s=startup_s, warm_pools=warm_pools)
    )
    spec = spec_for(agents, execute, SCRIPTED, roster)
    async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch, kube, run_id, agents, timeline)
            timeline.submitted = time.monotonic()
            outcome = await Run.execute(
                spec,
                platform=platform,
                run_id=run_id,
                artifact_root=root,
                progress=ReadyProgress(timeline, agents),
            )
            tasks.cancel_scope.cancel()
    if isinstance(outcome, ProgramFinished) and outcome.succeeded:
        ledger = open_ledger_artifacts(
            spec.catalog, outcome.receipt.ledger_dir, trusted_key=outcome.receipt.public_key
        )
        for event in ledger.events(AgentRuntimeReady):
            start = event.sandbox_start or "none"
            timeline.starts[start] = timeline.starts.get(start, 0) + 1
        return timeline
    timeline.load = os.getloadavg()
    if isinstance(outcome, PlatformLost):
        detail = f"{outcome.cause.reason}: {outcome.cause.detail}"
    else:
        detail = repr(outcome)
    raise KindRunFailed(agents, detail, timeline)


async def on_kwok(
    plane: KwokPlane, queue: str, agents: int, root: Path, roster: Roster
) -> Timeline:
    """Submit -> admitted -> every pod Running on the KWOK node; then the run is cancelled."""
    run_id = new_run_id()
    timeline = Timeline()

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("a KWOK pod runs nothing: no gate can pass")

    # A KWOK pod's address is fake (kind_kwok.POD_CIDR), and that range routes off this machine,
    # where something may answer: its bridge is dialled instead at a loopback port bound here and
    # never listened on, which refuses, until the run is cancelled.
    nowhere = socket.socket()
    nowhere.bind(("127.0.0.1", 0))
    refused = ("127.0.0.1", nowhere.getsockname()[1])

    async def refusing(run_id: str, agent: str, default: tuple[str, int]) -> tuple[str, int]:
        return refused

    platform = KubernetesPlatform(settings(plane, cluster_queue=queue), bridge_address=refusing)
    with nowhere:
        async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch, kube, run_id, agents, timeline)

                async def run() -> None:
                    timeline.submitted = time.monotonic()
                    outcome = await Run.execute(
                        spec_for(agents, execute, PINNED, roster),
                        platform=platform,
                        run_id=run_id,
                        artifact_root=root,
                    )
                    # Its gate failed before every pod ran: no KWOK figure this round.
                    if isinstance(outcome, PlatformLost):
                        timeline.ended = f"{outcome.cause.reason}: {outcome.cause.detail}"
                    timeline.running.set()

                tasks.start_soon(run)
                with anyio.fail_after(300):
                    await timeline.running.wait()
                tasks.cancel_scope.cancel()  # the run finalizes and deletes its namespace
    return timeline


async def on_local(agents: int, root: Path, roster: Roster) -> float:
    gate: list[float] = []

    async def execute(ctx: RunContext) -> None:
        gate.append(time.monotonic())

    submitted = time.monotonic()
    outcome = await Run.execute(
        spec_for(agents, execute, PINNED, roster), platform=LocalPlatform(), artifact_root=root
    )
    assert isinstance(outcome, ProgramFinished) and outcome.succeeded, outcome
    return gate[0] - submitted


def _core(plane: KindPlane) -> Any:
    from kubernetes import client

    return client.CoreV1Api(plane.api_client())


@dataclass
class Row:
    agents: int
    real: Timeline
    kwok: Timeline
    local: float


@dataclass(frozen=True)
class Sweep:
    """What every size of one invocation shares."""

    queue: str
    kwok_queue: str
    roster: Roster
    rounds: int
    startup_s: float


async def measure(
    plane: KindPlane, kwok_plane: KwokPlane, sweep: Sweep, sizes: list[int], rows: list[Row]
) -> None:
    """Each size in turn, into ``rows``; a failure on kind is printed and ends the sweep (the
    next size cannot pass either)."""
    with tempfile.TemporaryDirectory(prefix="k8s-bench-") as scratch:
        root = Path(scratch)
        for agents in sizes:
            try:
                real = [
                    await on_kind(plane, sweep.queue, agents, root, sweep.roster, sweep.startup_s)
                    for _ in range(sweep.rounds)
                ]
            except KindRunFailed as failed:
                _print_failure(failed)
                break
            kwok = [
                await on_kwok(kwok_plane, sweep.kwok_queue, agents, root, sweep.roster)
                for _ in range(sweep.rounds)
            ]
            local = min([await on_local(agents, root, sweep.roster) for _ in range(sweep.rounds)])
            row = Row(
                agents,
                min(real, key=lambda t: t.at["gate"]),
                min(kwok, key=lambda t: t.at.get("containers running", math.inf)),
                local,
            )
            rows.append(row)
            print(
                f"{agents} agents: kind {row.real.at['gate']:.2f} s to the gate (load "
                f"{_load(row.real)}), KWOK {_kwok(row.kwok)}, local {local:.2f} s to the gate",
                flush=True,
            )


@dataclass
class WarmRow:
    agents: int
    warm: Timeline
    cold: Timeline
    local: float


POOL_READY_S = 900.0


async def _scale_pool(kube: Kube, pool: Obj, replicas: int) -> float:
    """Scale the pool to ``replicas`` and wait until that many are ready (0: until its pods are
    gone); the seconds that took."""
    name = pool["metadata"]["name"]
    started = time.monotonic()
    await kube.apply({**pool, "spec": {**pool["spec"], "replicas": replicas}})
    with anyio.fail_after(POOL_READY_S):
        while True:
            found = await kube.get("SandboxWarmPool", name, warm.WARM_NAMESPACE) or {}
            ready = int((found.get("status") or {}).get("readyReplicas") or 0)
            pods, _ = await kube.list(
                "Pod", warm.WARM_NAMESPACE, label_selector=f"{warm.POOL_LABEL}={name}"
            )
            if (replicas and ready >= replicas) or (not replicas and not pods):
                return time.monotonic() - started
            await anyio.sleep(1.0)


async def warm_row(
    plane: KindPlane, kube: Kube, pool: Obj, sweep: Sweep, agents: int, root: Path
) -> WarmRow:
    """One size: warm (claimed from a pool of that size), cold (the pool at 0), local."""
    warm_runs, cold_runs = [], []
    for _ in range(sweep.rounds):
        filled = await _scale_pool(kube, pool, agents)
        print(f"{agents} agents: a pool of {agents} ready in {filled:.1f} s", flush=True)
        warm_runs.append(
            await on_kind(
                plane, sweep.queue, agents, root, sweep.roster, sweep.startup_s, warm_pools=True
            )
        )
        await _scale_pool(kube, pool, 0)
        cold_runs.append(
            await on_kind(plane, sweep.queue, agents, root, sweep.roster, sweep.startup_s)
        )
    local = min([await on_local(agents, root, sweep.roster) for _ in range(sweep.rounds)])
    return WarmRow(
        agents,
        min(warm_runs, key=lambda t: t.at["gate"]),
        min(cold_runs, key=lambda t: t.at["gate"]),
        local,
    )


async def measure_warm(
    plane: KindPlane, sweep: Sweep, sizes: list[int], rows: list[WarmRow]
) -> None:
    """Each size in turn, into ``rows``; a failure on kind is printed and ends the sweep."""
    platform = KubernetesPlatform(settings(plane))
    agent = scripted(
        image=SCRIPTED, resources=sweep.roster.resources,
        ready_timeout_s=sweep.roster.ready_timeout_s,
    )  # fmt: skip
    manifests = warm.pool_manifests(platform.pinned(agent), 0)
    pool = manifests[-1]
    async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
        for manifest in manifests:
            await kube.apply(manifest)
        with tempfile.TemporaryDirectory(prefix="k8s-bench-") as scratch:
            for agents in sizes:
                try:
                    row = await warm_row(plane, kube, pool, sweep, agents, Path(scratch))
                except KindRunFailed as failed:
                    _print_failure(failed)
                    break
                rows.append(row)
                print(
                    f"{agents} agents: warm {row.warm.at['gate']:.2f} s {row.warm.starts}, "
                    f"cold {row.cold.at['gate']:.2f} s {row.cold.starts}, "
                    f"local {row.local:.2f} s",
                    flush=True,
                )
                milestones = ", ".join(f"{k} {v:.2f} s" for k, v in row.warm.at.items())
                print(f"{agents} agents: the warm run's milestones: {milestones}", flush=True)
        await kube.delete("SandboxWarmPool", pool["metadata"]["name"], warm.WARM_NAMESPACE)


def report_warm(rows: list[WarmRow]) -> None:
    print(
        "\n| agents | warm submit -> gate | cold submit -> gate | local submit -> gate | "
        "warm / local | cold / local | warm / cold | started warm |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        w, c, local = row.warm.at["gate"], row.cold.at["gate"], row.local
        print(
            f"| {row.agents} | {w:.2f} s | {c:.2f} s | {local:.2f} s | {w / local:.2f}x | "
            f"{c / local:.2f}x | {w / c:.2f}x | {row.warm.starts.get('warm', 0)} of "
            f"{row.agents} |"
        )


def _kwok(timeline: Timeline) -> str:
    if "containers running" in timeline.at:
        return f"{timeline.at['containers running']:.2f} s to pods Running"
    return f"no figure (its run ended first: {timeline.ended})"


def _load(timeline: Timeline) -> str:
    return " / ".join(f"{value:.1f}" for value in timeline.load)


def _print_failure(failed: KindRunFailed) -> None:
    timeline = failed.timeline
    reached = ", ".join(f"{name} {at:.2f} s" for name, at in timeline.at.items()) or "nothing"
    print(f"KIND RUN FAILED, {failed} (load {_load(timeline)}; reached: {reached})", flush=True)
    for pod, verdict in sorted(timeline.unschedulable.items()):
        print(f"  still unschedulable as the run ended: {pod}: {verdict}", flush=True)


def report(rows: list[Row]) -> None:
    print(
        "\n| agents | kind submit -> gate | local submit -> gate | ratio | kind "
        "submit -> pods Running | KWOK submit -> pods Running | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        gate, running = row.real.at["gate"], row.real.at["containers running"]
        kwok = row.kwok.at.get("containers running")
        versus = f"{kwok:.2f} s | {running / kwok:.2f}x" if kwok else "- | -"
        print(
            f"| {row.agents} | {gate:.2f} s | {row.local:.2f} s | {gate / row.local:.2f}x | "
            f"{running:.2f} s | {versus} |"
        )
    print("\nPhases, each ending when the roster's last agent got there (seconds from the last):")
    print("\n| agents | where | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for row in rows:
        for where, timeline in (("kind", row.real), ("KWOK", row.kwok)):
            shares = dict(timeline.phases())
            cells = [f"{shares[p]:.2f}" if p in shares else "-" for p in PHASES]
            print(f"| {row.agents} | {where} | " + " | ".join(cells) + " |")
    print(
        f"\nOn kind's agents' node at the gate, per agent pod (mean / max; CPU over {SAMPLE_S:g} s "
        "with every agent idle), and this process (the controller: router, bridges):"
    )
    print(
        "\n| agents | load average at the gate | pods | processes | RSS MiB | PSS MiB | "
        "anonymous MiB (cgroup) | CPU millicores | controller RSS MiB | MemAvailable MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        usage = row.real.usage
        if usage is None:
            continue
        cells = [
            f"{mean:.1f} / {most:.1f}"
            for mean, most in (usage.rss_mib, usage.pss_mib, usage.anon_mib, usage.cpu_millicores)
        ]
        print(
            f"| {row.agents} | {_load(row.real)} | {usage.pods} | {usage.processes} | "
            + " | ".join(cells)
            + f" | {usage.controller_rss_mib:.0f} | {usage.available_mib:.0f} |"
        )
    for row in rows:
        present = sum("already present" in message for message in row.real.pulled)
        print(
            f"\n{row.agents} agents, image pulls on kind: {len(row.real.pulled)} "
            f"kubelet Pulled events, {present} of them 'already present on machine' (0 s pulled)"
        )


def image_import_s(plane: KindPlane) -> float:
    """One ``ctr images import`` of the scripted image's archive into the agents' node's
    containerd (done for each image when the cluster is made; no run pulls)."""
    assert plane.node is not None
    ref = plane.images.images[SCRIPTED]
    archive = Path(plane.images.archives[ref])
    started = time.monotonic()
    plane.cluster.import_image(ref, archive, nodes=[plane.node.name])
    return time.monotonic() - started


def node_allocatable(plane: KindPlane) -> str:
    assert plane.node is not None
    node = _core(plane).read_node(plane.node.name)
    held = node.status.allocatable
    return ", ".join(f"{key} {held[key]}" for key in ("cpu", "memory", "pods", "ephemeral-storage"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--agents", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--cpu-request",
        type=float,
        default=SCRIPTED_RESOURCES.cpu * 1000,
        help="millicores each agent container requests (default: the scripted runtime's, "
        "%(default)g); the pod's keeper container adds 1",
    )
    parser.add_argument(
        "--max-pods",
        type=int,
        default=110,
        help="the agents' node's kubelet maxPods (default: the kubelet's own, %(default)s)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=300.0,
        help="seconds an agent's pod may take to run (the platform's startup_timeout_s)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=60.0,
        help="seconds a running agent may take to attach and authenticate (the runtime's "
        "ready_timeout_s; default: the scripted runtime's, %(default)g)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="measure warm pools (claimed) against cold Sandboxes and the local profile, instead "
        "of KWOK",
    )
    args = parser.parse_args()
    resources = dataclasses.replace(SCRIPTED_RESOURCES, cpu=args.cpu_request / 1000)
    roster = Roster(resources, args.ready_timeout)
    print(f"roster: each agent {resources}, ready timeout {args.ready_timeout:g} s", flush=True)
    images = Images.load(build_images())
    with KindPlane(images, max_pods=args.max_pods, name="society-kind-bench") as plane:
        if args.warm:
            queue = make_cluster_queue(plane, cpu="64", memory="64Gi")
            sweep = Sweep(queue, "", roster, args.rounds, args.startup_timeout)
            warm_rows: list[WarmRow] = []
            try:
                anyio.run(measure_warm, plane, sweep, args.agents, warm_rows)
            finally:
                report_warm(warm_rows)
            return
        kwok = start_kwok(plane.cluster, 1, NodeCapacity())
        print(f"kind's agents' node allocatable: {node_allocatable(plane)}", flush=True)
        queue = make_cluster_queue(plane, cpu="64", memory="64Gi")
        kwok_queue = make_cluster_queue(kwok, cpu="64", memory="64Gi")
        imported = image_import_s(plane)
        sweep = Sweep(queue, kwok_queue, roster, args.rounds, args.startup_timeout)
        rows: list[Row] = []
        try:
            anyio.run(measure, plane, kwok, sweep, args.agents, rows)
        finally:  # what was measured, even when a later size broke the sweep
            report(rows)
            print(
                f"image import into the agents' node's containerd (once per image when the "
                f"cluster is made, not per run): {imported:.2f} s for the scripted image"
            )


if __name__ == "__main__":
    main()
