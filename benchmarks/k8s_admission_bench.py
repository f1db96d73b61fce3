"""Submit -> all pods Running for a large roster on KWOK nodes, phase by phase, next to the same
objects created straight through the API, same run.

    nice .venv/bin/python benchmarks/k8s_admission_bench.py [--agents 50 200 1000]

Starts the kind test cluster (tests/kubernetes/kind_plane.py, with Kueue and Agent Sandbox from
their release manifests) with the KWOK controller deployed into it and two fake nodes whose pods
turn Running at once and run nothing (tests/kubernetes/kind_kwok.py), then a ClusterQueue with
room for the largest roster. Agents go to the fake nodes by the platform's node selector and
toleration. CPU is counted per node container (its cgroup), plus this process. Runs as root
(podman, routes).

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
from collections.abc import Iterator
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests" / "kubernetes"))

from cluster_support import make_cluster_queue
from cp_build import build_images
from cp_images import Images
from kind_kwok import KwokPlane, start_kwok
from kind_plane import KindPlane
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


@contextlib.contextmanager
def kwok_plane() -> Iterator[KwokPlane]:
    started = time.monotonic()
    with KindPlane(Images.load(build_images()), name="society-kind-admission") as kind:
        kwok = start_kwok(kind.cluster, 2, SCALE_NODE_CAPACITY)
        print(f"kind cluster and KWOK nodes up in {time.monotonic() - started:.0f} s", flush=True)
        yield kwok


async def measure(plane: KwokPlane, queue: str, sizes: list[int]) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="k8s-admission-") as scratch:
        for agents in sizes:
            before = cpu_seconds(plane)
            run = await start_roster(plane, queue, agents, Path(scratch))
            platform_cpu = cpu_spent(before, cpu_seconds(plane))
            print(f"{agents} agents, platform: {_phases(run)}", flush=True)
            print(f"    CPU s: {_cpu(platform_cpu)}", flush=True)
            before = cpu_seconds(plane)
            direct = await create_directly(plane, agents)
            direct_cpu = cpu_spent(before, cpu_seconds(plane))
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
    parser.add_argument("--agents", type=int, nargs="+", default=[50, 200, 1000])
    args = parser.parse_args()
    with kwok_plane() as plane:
        cores, memory = scale_queue_quota(max(args.agents))
        queue = make_cluster_queue(plane, cpu=cores, memory=memory)
        rows = anyio.run(measure, plane, queue, args.agents)
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
