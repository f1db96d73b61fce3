"""Admission on the kubernetes platform against the real local control plane with KWOK nodes:
what happens before any pod runs. Whole runs, whose pods must run, are in tests/kubernetes/node.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    PINNED,
    anyio_backend,
    artifacts,
    left_in_cluster,
    make_cluster_queue,
    on_cluster,
    small_queue,
)
from k8s_run_support import echo, hear_everyone, spec_of, verified
from kind_kwok import KwokPlane

from controller import Run
from controller.agents import Resources, scripted
from controller.events.run import ReadinessGateFailed, RosterAdmitted, RosterRefused
from controller.run import PlatformLost
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_with_quota_for_part_of_the_roster_nothing_starts_and_admission_times_out(
    control_plane: KwokPlane, small_queue: str, tmp_path: Path
) -> None:
    roster = {name: scripted(echo, image=PINNED) for name in ("alice", "bob", "carol")}
    spec = spec_of(hear_everyone, PINNED, **roster)
    run_id = new_run_id()
    async with on_cluster(
        control_plane, run_id, cluster_queue=small_queue, admission_timeout_s=4.0
    ) as (platform, kube, record):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "admission-timeout"
    ledger = verified(spec, outcome)
    refused = next(iter(ledger.events(RosterRefused)))
    assert refused.reason == "admission-timeout" and "ClusterQueue" in refused.detail
    assert list(ledger.events(RosterAdmitted)) == []
    assert record.all("sandbox") == [] and record.first("admitted") is None
    assert left == []


@pytest.fixture(scope="module")
def wide_queue(control_plane: KwokPlane) -> Iterator[str]:
    """A ClusterQueue with more CPU than any one KWOK node has (16 cores)."""
    yield make_cluster_queue(control_plane, cpu="40")


async def test_an_agent_no_node_can_take_fails_the_gate_with_the_schedulers_verdict(
    control_plane: KwokPlane, wide_queue: str, tmp_path: Path
) -> None:
    """Kueue admits bob's 17 cores (the queue has 40), but no node has them: his pod stays
    Pending, and the failed gate says which agent, the scheduler's reason and what to do."""
    greedy = Resources(cpu=17.0, memory_mib=64, memory_limit_mib=1536)
    spec = spec_of(hear_everyone, PINNED, bob=scripted(echo, image=PINNED, resources=greedy))
    run_id = new_run_id()
    async with on_cluster(
        control_plane, run_id, cluster_queue=wide_queue, startup_timeout_s=5.0
    ) as (platform, kube, record):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "readiness-gate-failed", outcome.cause
    detail = outcome.cause.detail
    # The scheduler counts every node of the cluster (kind's and KWOK's): none can take bob.
    assert "agent bob" in detail and "pod bob Pending, unschedulable: 0/" in detail, detail
    assert "2 Insufficient cpu" in detail and "lower the roster's resource requests" in detail
    ledger = verified(spec, outcome)
    failed = next(iter(ledger.events(ReadinessGateFailed)))
    assert failed.reason == "pod-unschedulable" and failed.failed == ["bob"]
    assert record.first("admitted") is not None and left == []
