"""Submit -> readiness gate on the kubernetes platform's real node, next to the local profile,
same run.

    sudo .venv/bin/python benchmarks/k8s_startup_bench.py [--agents 5 10] [--rounds 1]

Starts the test control plane with its real node (tests/kubernetes/controlplane.py: etcd,
kube-apiserver, Kueue, Agent Sandbox, and containerd, the kubelet, kube-proxy and kube-router in
a network namespace; needs root, Go, the cached build and the images of
scripts/build-images.sh), a ClusterQueue, then for each roster size runs a scripted society on
the kubernetes platform (Kueue admission, one Sandbox per agent, each a pod on the node from the
scripted image; the controller is this process, reached over the node's veth) and on the local
profile, and times submit -> the program's first line (the gate passed). Best of ``--rounds``.
Not a test. KWOK is not measured: its pods run nothing, so no run there passes the gate.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kubernetes"))

from cluster_support import PINNED, SCRIPTED, make_cluster_queue, settings
from controlplane import ControlPlane, Images, build_control_plane
from cp_build import build_images

from controller import Run, RunSpec
from controller.agents import scripted
from controller.platform.kubernetes import KubernetesPlatform
from controller.platform.local import LocalPlatform
from controller.run import ProgramFinished, RunContext
from controller.run.runid import new_run_id


def spec_for(agents: int, gate: list[float], image: str) -> RunSpec:
    async def execute(ctx: RunContext) -> None:
        gate.append(time.monotonic())

    return RunSpec.define(
        id="bench.k8s-startup/v1",
        agents={f"agent-{i:03d}": scripted(image=image) for i in range(agents)},
        execute=execute,
    )


async def on_kubernetes(plane: ControlPlane, queue: str, agents: int, root: Path) -> float:
    gate: list[float] = []
    run_id = new_run_id()
    platform = KubernetesPlatform(settings(plane, cluster_queue=queue))
    submitted = time.monotonic()
    outcome = await Run.execute(
        spec_for(agents, gate, SCRIPTED), platform=platform, run_id=run_id, artifact_root=root
    )
    assert isinstance(outcome, ProgramFinished) and outcome.succeeded, outcome
    return gate[0] - submitted


async def on_local(agents: int, root: Path) -> float:
    gate: list[float] = []
    submitted = time.monotonic()
    outcome = await Run.execute(
        spec_for(agents, gate, PINNED), platform=LocalPlatform(), artifact_root=root
    )
    assert isinstance(outcome, ProgramFinished) and outcome.succeeded, outcome
    return gate[0] - submitted


async def measure(plane: ControlPlane, queue: str, sizes: list[int], rounds: int) -> list[Any]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="k8s-bench-") as scratch:
        root = Path(scratch)
        for agents in sizes:
            cluster = min([await on_kubernetes(plane, queue, agents, root) for _ in range(rounds)])
            local = min([await on_local(agents, root) for _ in range(rounds)])
            rows.append((agents, cluster, local))
            print(f"{agents} agents: kubernetes {cluster:.2f} s, local {local:.2f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    images = Images.load(build_images())
    with ControlPlane(build_control_plane(), nodes=0, real_node=True, images=images) as plane:
        queue = make_cluster_queue(plane, cpu="8")
        rows = anyio.run(measure, plane, queue, args.agents, args.rounds)
    print("\n| agents | kubernetes (real node) submit -> gate | local submit -> gate | ratio |")
    print("|---|---|---|---|")
    for agents, cluster, local in rows:
        print(f"| {agents} | {cluster:.2f} s | {local:.2f} s | {cluster / local:.2f}x |")


if __name__ == "__main__":
    main()
