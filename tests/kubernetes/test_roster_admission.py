"""A 1,000-agent roster on KWOK nodes through the kubernetes platform's session: one Workload
admitted, every run object created, every pod Running. Timings are in
benchmarks/k8s_admission_bench.py, not here."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_support import anyio_backend, make_cluster_queue  # noqa: F401 (a fixture)
from kind_kwok import KwokPlane
from roster_scale import large_roster, scale_queue_quota, start_roster

from controller.platforms.kubernetes import Kube, objects, routing
from controller.platforms.kubernetes.kube import is_true

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENTS = 1000


async def test_a_thousand_agent_roster_is_admitted_as_one_workload_and_every_pod_runs(
    control_plane: KwokPlane, tmp_path: Path
) -> None:
    cpu, memory = scale_queue_quota(AGENTS)
    queue = make_cluster_queue(control_plane, cpu=cpu, memory=memory)
    run = await start_roster(control_plane, queue, AGENTS, tmp_path)
    agents = sorted(large_roster(AGENTS))

    workload = run.workload
    assert is_true(workload, "Admitted")
    assert [(s["name"], s["count"]) for s in workload["spec"]["podSets"]] == [("shape-0", AGENTS)]
    assignments = workload["status"]["admission"]["podSetAssignments"]
    assert [(a["name"], a["count"]) for a in assignments] == [("shape-0", AGENTS)]

    def names(kind: str, role: str | None = None) -> list[str]:
        return sorted(
            item["metadata"]["name"]
            for item in run.listed[kind]
            if role is None or item["metadata"].get("labels", {}).get(objects.ROLE_LABEL) == role
        )

    assert names("Sandbox") == agents
    assert all(is_true(sandbox, "Ready") for sandbox in run.listed["Sandbox"])
    assert names("Secret", "agent") == sorted(objects.agent_secrets_name(a) for a in agents)
    assert names("Secret", "router") == [objects.ROUTER_CA_SECRET]
    assert names("Service") == sorted([*agents, objects.ROUTER_SERVICE])
    policies = routing.network_policies(run.run_id, controller_ports=[1], bridge_ports=[1])
    assert names("NetworkPolicy") == sorted(p["metadata"]["name"] for p in policies)
    pods = run.listed["Pod"]
    assert sorted(p["metadata"]["labels"][objects.AGENT_LABEL] for p in pods) == agents
    assert {p["status"]["phase"] for p in pods} == {"Running"}

    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        assert await kube.get("Namespace", run.run_id) is None  # the session's cleanup
