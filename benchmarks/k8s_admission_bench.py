"""Submit -> all pods Running for a large roster on KWOK nodes, phase by phase, next to the same
objects created straight through the API, same run.

    nice .venv/bin/python benchmarks/k8s_admission_bench.py [--plane go|kind] [--agents 50 200 1000]

Starts a cluster with two KWOK nodes whose pods turn Running at once and run nothing, then a
ClusterQueue with room for the largest roster:

- ``--plane go`` (default): the test control plane (tests/kubernetes/controlplane.py: etcd,
  kube-apiserver, controller-manager, scheduler, Kueue, Agent Sandbox as host processes; needs
  Go and the cached build). CPU is counted per process.
- ``--plane kind``: the kind test cluster (tests/kubernetes/kind_plane.py, with Kueue and Agent
  Sandbox from their release manifests) and the KWOK controller deployed into it
  (tests/kubernetes/kind_kwok.py); agents go to the fake nodes by the platform's node selector
  and toleration. CPU is counted per node container (its cgroup), plus this process. Runs as
  root (podman, routes).

Then for each size:

- the platform: ``KubernetesPlatform`` admits the roster (one Workload), its session opens the
  namespace (owner, identity, router Service, CA, NetworkPolicies), Kueue admits, and every
  agent is started at once as the run kernel does (Secrets, one Sandbox each; Agent Sandbox
  makes its pod and Service), until each Sandbox is Ready with its pod Running;
- the baseline: the same Secrets, Services, NetworkPolicies and pods created directly
  (64 requests in flight), until every pod is Running: the API server's, scheduler's and
  KWOK's own limit here, with no Kueue, no Agent Sandbox, no session.

Not a test: tests/kubernetes/test_roster_admission.py asserts the 1,000-agent outcome.
The readiness gate needs agent processes: benchmarks/k8s_startup_bench.py on the real node.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests" / "kubernetes"))

from cluster_support import make_cluster_queue
from controlplane import ControlPlane, build_control_plane
from roster_scale import (
    SCALE_NODE_CAPACITY,
    RosterStarted,
    cpu_seconds,
    cpu_spent,
    create_directly,
    scale_queue_quota,
    start_roster,
)

Row = tuple[int, float, float, dict[str, float], dict[str, float]]


def _phases(run: RosterStarted) -> str:
    clock = run.clock
    return (
        f"opened {run.opened:.2f} s, admitted {run.admitted:.2f} s, "
        f"last Secret {clock.last('Secret'):.2f} s, last Sandbox {clock.last('Sandbox'):.2f} s, "
        f"last pod {clock.last('Pod'):.2f} s, last Service {clock.last('Service'):.2f} s, "
        f"all pods Running {max(clock.running.values()):.2f} s, all ready {run.ready:.2f} s"
    )


def _cpu(spent: dict[str, float]) -> str:
    busy = sorted(spent.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in busy if seconds >= 0.05)


Cpu = Callable[[], dict[str, float]]


@contextlib.contextmanager
def go_plane() -> Iterator[tuple[Any, Cpu]]:
    with ControlPlane(build_control_plane(), nodes=2, node_capacity=SCALE_NODE_CAPACITY) as plane:
        yield plane, lambda: cpu_seconds(plane)


@contextlib.contextmanager
def kind_plane() -> Iterator[tuple[Any, Cpu]]:
    from cp_build import build_images
    from cp_images import Images
    from kind_kwok import node_cpu_seconds, start_kwok
    from kind_plane import KindPlane

    started = time.monotonic()
    with KindPlane(Images.load(build_images()), name="society-kind-admission") as kind:
        kwok = start_kwok(kind.cluster, 2, SCALE_NODE_CAPACITY)
        print(f"kind cluster and KWOK nodes up in {time.monotonic() - started:.0f} s", flush=True)

        def cpu() -> dict[str, float]:
            return node_cpu_seconds(kind.cluster) | {
                "this process (controller)": time.process_time()
            }

        yield kwok, cpu


async def measure(plane: Any, cpu: Cpu, queue: str, sizes: list[int]) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="k8s-admission-") as scratch:
        for agents in sizes:
            before = cpu()
            run = await start_roster(plane, queue, agents, Path(scratch))
            platform_cpu = cpu_spent(before, cpu())
            print(f"{agents} agents, platform: {_phases(run)}", flush=True)
            print(f"    CPU s: {_cpu(platform_cpu)}", flush=True)
            before = cpu()
            direct = await create_directly(
                plane, agents, placement=getattr(plane, "pod_placement", {})
            )
            direct_cpu = cpu_spent(before, cpu())
            print(
                f"{agents} agents, baseline: created {direct.created:.2f} s, "
                f"all pods Running {direct.running:.2f} s",
                flush=True,
            )
            print(f"    CPU s: {_cpu(direct_cpu)}", flush=True)
            rows.append(
                (agents, max(run.clock.running.values()), direct.running, platform_cpu, direct_cpu)
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plane", choices=["go", "kind"], default="go")
    parser.add_argument("--agents", type=int, nargs="+", default=[50, 200, 1000])
    args = parser.parse_args()
    print(f"plane: {args.plane}", flush=True)
    with (kind_plane if args.plane == "kind" else go_plane)() as (plane, cpu):
        cores, memory = scale_queue_quota(max(args.agents))
        queue = make_cluster_queue(plane, cpu=cores, memory=memory)
        rows = anyio.run(measure, plane, cpu, queue, args.agents)
    print(
        "\n| agents | platform: submit -> all pods Running | baseline (direct) | ratio "
        "| CPU s, platform (all processes) | CPU s, baseline | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for agents, platform, direct, platform_cpu, direct_cpu in rows:
        cpu, base = sum(platform_cpu.values()), sum(direct_cpu.values())
        print(
            f"| {agents} | {platform:.2f} s | {direct:.2f} s | {platform / direct:.2f}x "
            f"| {cpu:.1f} | {base:.1f} | {cpu / base:.2f}x |"
        )


if __name__ == "__main__":
    main()
