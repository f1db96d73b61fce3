"""A cluster run's module travels as content and the worker pod takes only cluster runs.

The worker never reads ``module_path`` (against the real control plane, as the worker's
ServiceAccount with the chart's rights, ``rbac_support``); content that does not
match its SHA-256 is refused by the worker and, once mounted, by the controller; the worker pod
(``SOCIETY_KUBE_IN_CLUSTER=1``) refuses a ``local`` run on the real ``SocietyRun`` workflow before
anything is created or imported.
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from cluster_support import PINNED, anyio_backend, artifacts  # noqa: F401 (fixture)
from k8s_run_support import run_society, temporal_address  # noqa: F401 (fixture)
from rbac_support import WORKER, worker_rights  # noqa: F401 (fixture)
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError

from controller.incluster.controller_job import MODULE_DIGEST_ENV, run_controller_job
from controller.lifecycle.activities import LifecycleActivities
from controller.platforms.kubernetes import (
    Kube,
    KubernetesSettings,
    delete_run_namespace,
    prepare_run_namespace,
)
from controller.run import RunRequest
from controller.run.module_source import MODULE_LIMIT, ModuleSource, ModuleSourceError
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio]

MARKED_MODULE = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
"""


@pytest.mark.slow
async def test_a_cluster_run_never_reads_a_path_on_the_worker_and_refuses_altered_content(
    worker_rights: str, tmp_path: Path
) -> None:
    """The old worker read any local file named by ``module_path`` and published it to the run's
    namespace in a ConfigMap; now only content the submitter sent travels, checked by digest."""
    private = tmp_path / "worker-private.py"
    private.write_text("TOKEN = 'worker-local secret'\n")
    run_id = new_run_id()
    settings = KubernetesSettings(
        kubeconfig=worker_rights,
        impersonate=WORKER,
        controller_job=True,
        controller_image=PINNED,
    )
    source = ModuleSource.read(private)
    altered = source.model_copy(update={"content": "run_spec = 'altered'\n"})
    async with Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker:
        await prepare_run_namespace(worker, run_id)
        try:
            reasons = []
            for module_source in (None, altered):
                request = RunRequest(
                    module_path=str(private),
                    module_source=module_source,
                    run_id=run_id,
                    profile="kubernetes",
                    artifact_root=str(tmp_path),
                )
                with anyio.fail_after(30):
                    try:
                        await run_controller_job(request, settings)
                    except Exception as error:
                        reasons.append(getattr(error, "reason", repr(error)))
            published = await worker.get("ConfigMap", "society-runspec", run_id)
            job_made = await worker.get("Job", "society-controller", run_id)
        finally:
            await delete_run_namespace(worker, run_id)
    assert reasons == ["module-source-missing", "module-digest-mismatch"]
    assert published is None and job_made is None


@pytest.mark.slow
async def test_the_worker_pod_refuses_a_local_profile_run_before_anything_is_created(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone who can reach the worker's task queue chooses the profile: ``local`` would import
    and run the module inside the worker pod, as the worker's ServiceAccount."""
    marker = tmp_path / "imported"
    module = tmp_path / "experiment.py"
    module.write_text(MARKED_MODULE.format(marker=str(marker)))
    root = artifacts(tmp_path)
    monkeypatch.setenv("SOCIETY_KUBE_IN_CLUSTER", "1")  # what the chart's Deployment sets
    activities = LifecycleActivities()
    request = RunRequest(
        module_path=str(module), run_id=new_run_id(), profile="local", artifact_root=str(root)
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await run_society(temporal_address, request, activities, activities.execute)
    cause = failure.value.cause
    assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError)
    assert cause.cause.type == "local-profile-in-cluster"
    assert cause.cause.non_retryable
    assert "society run" in cause.cause.message  # the next step
    assert not marker.exists()
    assert list(root.iterdir()) == []


def test_the_controller_imports_a_mounted_module_only_when_it_matches_its_digest(
    tmp_path: Path,
) -> None:
    """The ConfigMap could be replaced between the worker's create and the pod's mount."""
    marker = tmp_path / "imported"
    mounted = tmp_path / "runspec" / "experiment.py"
    mounted.parent.mkdir()
    sent = "run_spec = None\n"  # what the submitter sent, and the digest the Job carries
    mounted.write_text(MARKED_MODULE.format(marker=str(marker)))  # what the pod finds mounted
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SOCIETY_")},
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "SOCIETY_RUN_ID": new_run_id(),
        "SOCIETY_RUN_MODULE": str(mounted),
        MODULE_DIGEST_ENV: hashlib.sha256(sent.encode()).hexdigest(),
        "SOCIETY_PROFILE": "kubernetes",
        "SOCIETY_ARTIFACTS": str(tmp_path / "artifacts"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "controller.incluster.main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["controller"] == "refused" and line["reason"] == "module-digest-mismatch"
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def test_a_module_that_cannot_travel_is_refused_with_a_typed_reason(tmp_path: Path) -> None:
    """What ``society run --profile <cluster>`` reports instead of a traceback."""
    cases = {
        "a b.py": (b"run_spec = None\n", "module-name-invalid"),
        "big.py": (b"#" * (MODULE_LIMIT + 1), "module-too-large"),
        "binary.py": (b"\xff\xfe", "module-not-text"),
    }
    reasons = {}
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ModuleSourceError) as refused:
            ModuleSource.read(tmp_path / name)
        reasons[name] = refused.value.reason
    assert reasons == {name: reason for name, (_, reason) in cases.items()}
    (tmp_path / "my-experiment.py").write_text("run_spec = None\n")
    sent = ModuleSource.read(tmp_path / "my-experiment.py")
    assert sent.verified() == "run_spec = None\n"
    assert sent.sha256 == hashlib.sha256(b"run_spec = None\n").hexdigest()
