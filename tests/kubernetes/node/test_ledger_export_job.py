"""The GKE profile's path, on kind: the run worker, as its ServiceAccount, runs the
controller as the run's Job writing to a ledger claim, then exports the run directory from that
claim to the bucket with an export Job in the run's namespace, and deletes the namespace.

Nothing is substituted but the bucket: fake-gcs-server (the GCS emulator), listening on the node's
host address so that the export pod reaches it through the run's NetworkPolicy. Against an
emulator there is no Security Token Service, so the worker mints no token and the export Job
gets none (``ledger_export``); the token's boundary is checked in
``tests/cluster/test_ledger_export_objects.py``. The worker acts through impersonation with the
chart's RBAC and admission policies applied, as in ``test_worker_identity``.
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    SCRIPTED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
)
from gcs_emulator import FakeGcsServer
from k8s_run_support import MODULE, run_society, temporal_address  # noqa: F401 (fixture)
from kind_plane import KindPlane
from rbac_support import WORKER, worker_rights  # noqa: F401 (fixture)
from temporalio import activity
from test_controller_job import in_cluster_worker, retained_volume

from controller.incluster.export_job import ROLE
from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.workflow import EXECUTE
from controller.platforms.kubernetes import Kube
from controller.platforms.kubernetes.kube import Informer, Obj
from controller.platforms.kubernetes.objects import ROLE_LABEL
from controller.run import RunRequest, RunResult
from controller.run.module_source import ModuleSource
from controller.run.runid import new_run_id
from controller.stores import gcs as gcs_ledger
from ledger import SigningKey

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
BUCKET = "society-ledgers"


@pytest.fixture
def node_gcs(control_plane: KindPlane, tmp_path: Path) -> Iterator[FakeGcsServer]:
    """fake-gcs-server on the node's host address: the export pod's only way out."""
    server = FakeGcsServer(tmp_path / "gcs", host=control_plane.address)
    server.root.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def export_pods(kube: Kube, run_id: str, seen: dict[str, Obj]) -> None:
    """Record every export pod of the run (name -> last seen object) until cancelled."""
    informer = Informer(kube, "Pod", run_id, label_selector=f"{ROLE_LABEL}={ROLE}")

    def note(i: Informer) -> None:
        seen.update(i.objects)
        return None

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(informer.run)
        await informer.until(note)


async def test_a_cluster_run_is_exported_from_its_claim_by_an_export_job_and_verifies_pinned(
    control_plane: KindPlane,
    worker_rights: str,
    cluster_queue: str,
    temporal_address: str,
    node_gcs: FakeGcsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=SCRIPTED)))
    root = artifacts(tmp_path)
    key = SigningKey.generate()
    (tmp_path / "operator.pem").write_bytes(key.private_pem())
    (tmp_path / "operator.pub").write_text(key.public_key + "\n")
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_IMPERSONATE", WORKER)
    monkeypatch.setenv("SOCIETY_SIGNING_KEY", str(tmp_path / "operator.pem"))
    monkeypatch.setenv("SOCIETY_LEDGER_EXPORT", f"gs://{BUCKET}")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", node_gcs.url)
    gcs_ledger.storage_client().create_bucket(BUCKET)
    pods: dict[str, Obj] = {}

    with retained_volume(control_plane, run_id, monkeypatch):
        async with Kube.connect(kubeconfig=worker_rights) as admin:
            activities = LifecycleActivities()

            @activity.defn(name=EXECUTE)
            async def execute(request: RunRequest) -> RunResult:
                return await activities.execute(request)

            request = RunRequest(
                module_path=str(tmp_path / "not-on-the-worker.py"),
                module_source=ModuleSource.read(module),
                run_id=run_id,
                profile="kubernetes",
                artifact_root=str(root),
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(export_pods, admin, run_id, pods)
                result = await run_society(temporal_address, request, activities, execute)
                tasks.cancel_scope.cancel()
            left = await left_in_cluster(admin, run_id)

    outcome = RunResult.model_validate({k: v for k, v in result.items() if k != "export"})
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    url = f"gs://{BUCKET}/{run_id}/"
    export: dict[str, Any] = result["export"]
    assert export["url"] == url and export["ledger"] == url + "ledger/main", export
    assert export["complete"] is True and export["objects"] > 3, export
    # The export came from the claim, through the export Job: the worker's disk has no ledger.
    assert not (root / run_id / "ledger").exists()
    assert len(pods) == 1, sorted(pods)
    pod = next(iter(pods.values()))
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    claim = next(v for v in spec["volumes"] if v["name"] == "artifacts")
    assert claim["persistentVolumeClaim"] == {"claimName": "ledger", "readOnly": True}
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["STORAGE_EMULATOR_HOST"] == node_gcs.url and gcs_ledger.TOKEN_FILE_ENV not in env
    terminated = pod["status"]["containerStatuses"][0]["state"].get("terminated") or {}
    assert terminated.get("exitCode") == 0, pod["status"]
    # completion.json is in the bucket, and the ledger verifies against the operator's key
    bucket = gcs_ledger.storage_client().bucket(BUCKET)
    assert bucket.get_blob(f"{run_id}/ledger/main/completion.json") is not None
    verify = [str(Path(sys.executable).parent / "society"), "ledger", "verify", url,
              "--trusted-key", str(tmp_path / "operator.pub")]  # fmt: skip
    verified = await anyio.run_process(verify, check=False, env={**os.environ})
    said = verified.stdout.decode() + verified.stderr.decode()
    assert verified.returncode == 0, said
    assert '"signature": "pinned"' in said, said
    # cleanup deleted the export Job, its policy and the namespace
    assert left == []
