"""Before a cluster run is submitted, `society run` checks the cluster and its ClusterQueue.

Runs against the real local control plane.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cluster_support import anyio_backend, cluster_queue, settings  # noqa: F401 (fixtures)
from kind_kwok import KwokPlane

from controller.platforms.kubernetes.preflight import ClusterUnavailable, check_cluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "negotiation.py"


async def test_a_reachable_cluster_with_its_queue_passes_the_preflight(
    control_plane: KwokPlane, cluster_queue: str
) -> None:
    await check_cluster(settings(control_plane, cluster_queue=cluster_queue))


async def test_a_missing_cluster_queue_is_named_with_the_next_step(
    control_plane: KwokPlane,
) -> None:
    with pytest.raises(ClusterUnavailable) as raised:
        await check_cluster(settings(control_plane, cluster_queue="no-such-queue"))
    assert raised.value.reason == "cluster-queue-missing"
    assert "no-such-queue" in str(raised.value) and "SOCIETY_CLUSTER_QUEUE" in str(raised.value)


def test_society_run_refuses_an_unreachable_cluster_before_anything_starts(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no-kubeconfig"
    completed = subprocess.run(
        [
            str(Path(sys.executable).parent / "society"),
            "run",
            str(EXAMPLE),
            "--profile",
            "kubernetes",
            "--artifacts",
            str(tmp_path / "artifacts"),
        ],
        env={"PATH": "/usr/bin:/bin", "SOCIETY_KUBECONFIG": str(missing), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stdout == ""
    assert f"no kubeconfig at {missing}" in completed.stderr
    assert "SOCIETY_KUBECONFIG" in completed.stderr
    assert not (tmp_path / "artifacts").exists() or not any(
        p.name.startswith("sr-") for p in (tmp_path / "artifacts").iterdir()
    )
