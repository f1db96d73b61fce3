"""Submit -> readiness gate on the kubernetes platform's real node, beside the local profile and
KWOK, same run, with the real node's time split into phases.

    sudo nice .venv/bin/python benchmarks/k8s_startup_bench.py [--agents 5 10] [--rounds 1]

Starts the test control plane with its real node (tests/kubernetes/controlplane.py: etcd,
kube-apiserver, Kueue, Agent Sandbox, and containerd, the kubelet, kube-proxy and kube-router in
a network namespace; needs root, Go, the cached build and the images of
scripts/build-images.sh) and one KWOK node (tainted off real pods), a ClusterQueue, then for each
roster size runs a scripted society:

- on the real node: Kueue admission, one Sandbox per agent, each a pod from the scripted image
  (the controller is this process, reached over the node's veth); submit -> the program's first
  line (the gate passed), and the phases, each ending when the roster's last agent got there, as
  this process saw them through watches: Workload admitted, every pod created (Agent Sandbox),
  every agent container running (the kubelet: sandbox, CNI, container start; image pulls are
  counted from the kubelet's ``Pulled`` events: the images were imported into containerd when
  the node started), every agent ready (its program booted in the container, its bridge
  attached and its router session authenticated: the controller's "agents ready" progress), the
  gate passed;
- on KWOK: the same roster placed on the KWOK node; its pods run nothing, so no gate can pass:
  submit -> admitted -> every pod Running, then the run is cancelled;
- on the local profile: submit -> gate.

Best of ``--rounds`` by submit -> gate (KWOK: by submit -> pods Running). Not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kubernetes"))

from cluster_support import PINNED, SCRIPTED, make_cluster_queue, settings
from controlplane import ControlPlane, Images, build_control_plane
from cp_build import build_images
from cp_node import KWOK_TAINT

from controller import Run, RunSpec
from controller.agents import scripted
from controller.platform.kubernetes import Kube, KubernetesPlatform, objects
from controller.platform.kubernetes.kube import Informer, Obj, is_true
from controller.platform.local import LocalPlatform
from controller.run import ProgramFinished, RunContext
from controller.run.progress import Counter
from controller.run.runid import new_run_id

PHASES = ("admitted", "pods created", "containers running", "agents ready", "gate")


@dataclass
class Timeline:
    """When the roster's last agent reached each milestone, seconds after submit."""

    submitted: float = field(default_factory=time.monotonic)
    at: dict[str, float] = field(default_factory=dict)
    pulled: list[str] = field(default_factory=list)
    """The kubelet's ``Pulled`` messages (``already present`` when nothing was pulled)."""

    running: anyio.Event = field(default_factory=anyio.Event)

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


def spec_for(agents: int, execute: Callable[[RunContext], Any], image: str) -> RunSpec:
    return RunSpec.define(
        id="bench.k8s-startup/v1",
        agents={f"agent-{i:03d}": scripted(image=image) for i in range(agents)},
        execute=execute,
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
        if len(pods.objects) >= agents:
            timeline.mark("pods created")
            if all(_agent_running(pod) for pod in pods.objects.values()):
                timeline.mark("containers running")

    async with anyio.create_task_group() as tasks:
        for informer in (workloads, pods):
            tasks.start_soon(informer.run)
            tasks.start_soon(informer.until, check)


async def on_real_node(plane: ControlPlane, queue: str, agents: int, root: Path) -> Timeline:
    run_id = new_run_id()
    timeline = Timeline()
    core = _core(plane)

    async def execute(ctx: RunContext) -> None:
        timeline.mark("gate")
        events = await anyio.to_thread.run_sync(
            lambda: core.list_namespaced_event(run_id, field_selector="reason=Pulled").items
        )
        timeline.pulled = [event.message or "" for event in events]

    platform = KubernetesPlatform(settings(plane, cluster_queue=queue))
    async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch, kube, run_id, agents, timeline)
            timeline.submitted = time.monotonic()
            outcome = await Run.execute(
                spec_for(agents, execute, SCRIPTED),
                platform=platform,
                run_id=run_id,
                artifact_root=root,
                progress=ReadyProgress(timeline, agents),
            )
            tasks.cancel_scope.cancel()
    assert isinstance(outcome, ProgramFinished) and outcome.succeeded, outcome
    return timeline


async def on_kwok(plane: ControlPlane, queue: str, agents: int, root: Path) -> Timeline:
    """Submit -> admitted -> every pod Running on the KWOK node; then the run is cancelled."""
    run_id = new_run_id()
    timeline = Timeline()

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("a KWOK pod runs nothing: no gate can pass")

    toleration = {**KWOK_TAINT, "operator": "Equal"}
    platform = KubernetesPlatform(
        settings(
            plane,
            cluster_queue=queue,
            agent_node_selector={"type": "kwok"},
            agent_tolerations=[toleration],
        )
    )
    async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch, kube, run_id, agents, timeline)

            async def run() -> None:
                timeline.submitted = time.monotonic()
                await Run.execute(
                    spec_for(agents, execute, SCRIPTED),
                    platform=platform,
                    run_id=run_id,
                    artifact_root=root,
                )

            tasks.start_soon(run)
            with anyio.fail_after(120):
                await timeline.running.wait()
            tasks.cancel_scope.cancel()  # the run finalizes and deletes its namespace
    return timeline


async def on_local(agents: int, root: Path) -> float:
    gate: list[float] = []

    async def execute(ctx: RunContext) -> None:
        gate.append(time.monotonic())

    submitted = time.monotonic()
    outcome = await Run.execute(
        spec_for(agents, execute, PINNED), platform=LocalPlatform(), artifact_root=root
    )
    assert isinstance(outcome, ProgramFinished) and outcome.succeeded, outcome
    return gate[0] - submitted


def _core(plane: ControlPlane) -> Any:
    from kubernetes import client

    return client.CoreV1Api(plane.api_client())


@dataclass
class Row:
    agents: int
    real: Timeline
    kwok: Timeline
    local: float


async def measure(plane: ControlPlane, queue: str, sizes: list[int], rounds: int) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="k8s-bench-") as scratch:
        root = Path(scratch)
        for agents in sizes:
            real = [await on_real_node(plane, queue, agents, root) for _ in range(rounds)]
            kwok = [await on_kwok(plane, queue, agents, root) for _ in range(rounds)]
            local = min([await on_local(agents, root) for _ in range(rounds)])
            row = Row(
                agents,
                min(real, key=lambda t: t.at["gate"]),
                min(kwok, key=lambda t: t.at["containers running"]),
                local,
            )
            rows.append(row)
            print(
                f"{agents} agents: real node {row.real.at['gate']:.2f} s to the gate, KWOK "
                f"{row.kwok.at['containers running']:.2f} s to pods Running, local "
                f"{local:.2f} s to the gate",
                flush=True,
            )
    return rows


def report(rows: list[Row]) -> None:
    print(
        "\n| agents | real node submit -> gate | local submit -> gate | ratio | real node "
        "submit -> pods Running | KWOK submit -> pods Running | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        gate, running = row.real.at["gate"], row.real.at["containers running"]
        kwok = row.kwok.at["containers running"]
        print(
            f"| {row.agents} | {gate:.2f} s | {row.local:.2f} s | {gate / row.local:.2f}x | "
            f"{running:.2f} s | {kwok:.2f} s | {running / kwok:.2f}x |"
        )
    print("\nPhases, each ending when the roster's last agent got there (seconds from the last):")
    print("\n| agents | where | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for row in rows:
        for where, timeline in (("real node", row.real), ("KWOK", row.kwok)):
            shares = dict(timeline.phases())
            cells = [f"{shares[p]:.2f}" if p in shares else "-" for p in PHASES]
            print(f"| {row.agents} | {where} | " + " | ".join(cells) + " |")
    for row in rows:
        present = sum("already present" in message for message in row.real.pulled)
        print(
            f"\n{row.agents} agents, image pulls on the real node: {len(row.real.pulled)} "
            f"kubelet Pulled events, {present} of them 'already present on machine' (0 s pulled)"
        )


def image_import_s(plane: ControlPlane) -> float:
    """One ``ctr images import`` of the scripted image's archive into the node's containerd (what
    the node does for each image when it starts; no run pulls)."""
    assert plane.node is not None and plane.images is not None
    ref = plane.images.images[SCRIPTED]
    archive = plane.images.archives[ref]
    started = time.monotonic()
    plane.node.ctr("images", "import", "--base-name", ref.split("@", 1)[0], archive)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    images = Images.load(build_images())
    with ControlPlane(build_control_plane(), nodes=1, real_node=True, images=images) as plane:
        queue = make_cluster_queue(plane, cpu="8")
        imported = image_import_s(plane)
        rows = anyio.run(measure, plane, queue, args.agents, args.rounds)
    report(rows)
    print(
        f"image import into the node's containerd (once per image at node start, not per run): "
        f"{imported:.2f} s for the scripted image"
    )


if __name__ == "__main__":
    main()
