"""Admission on the kubernetes platform against the real local control plane with KWOK nodes:
what happens before any pod runs. Whole runs, whose pods must run, are in tests/kubernetes/node.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

from pathlib import Path

import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    PINNED,
    anyio_backend,
    artifacts,
    left_in_cluster,
    on_cluster,
    small_queue,
)
from controlplane import ControlPlane
from k8s_run_support import echo, hear_everyone, spec_of, verified

from controller import Run
from controller.agents import scripted
from controller.events.run import RosterAdmitted, RosterRefused
from controller.run import ClusterLost
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_with_quota_for_part_of_the_roster_nothing_starts_and_admission_times_out(
    control_plane: ControlPlane, small_queue: str, tmp_path: Path
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
    assert isinstance(outcome, ClusterLost), outcome
    assert outcome.cause.reason == "admission-timeout"
    ledger = verified(spec, outcome)
    refused = next(iter(ledger.events(RosterRefused)))
    assert refused.reason == "admission-timeout" and "ClusterQueue" in refused.detail
    assert list(ledger.events(RosterAdmitted)) == []
    assert record.all("sandbox") == [] and record.first("admitted") is None
    assert left == []
