"""The export Job's objects and reports (``ledger_export``), and what the token it gets allows.

The Job itself runs on the real node in ``tests/kubernetes/node/test_ledger_export_job.py``.
Here: the pieces a hostile or broken run could bend. The pod holds no service-account token and
mounts the claim read-only; its egress reaches GCS or only the emulator, never the metadata
server; the token is narrowed to one run's prefix; the worker refuses to export without a claim;
and a pod's report is read as it is, with garbage reported as a failed export.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from controller.incluster.export_job import (
    METADATA_SERVER,
    TOKEN_SECRET,
    _reported,
    export_job,
    export_policy,
    token_secret,
)
from controller.incluster.worker_requests import WorkerRefused, check_worker_request
from controller.platforms.kubernetes import KubernetesSettings
from controller.run import RunRequest
from controller.run.module_source import ModuleSource
from controller.stores import gcs as gcs_ledger
from controller.stores.gcs import ExportReceipt, LedgerExportError

RUN = "sr-" + "a" * 32
IMAGE = "localhost/society/controller@sha256:" + "1" * 64


def job(*, token: bool, emulator: str | None) -> dict:
    return export_job(
        RUN, image=IMAGE, claim="society-ledger", destination=f"gs://b/{RUN}/", token=token,
        emulator=emulator,
    )  # fmt: skip


def test_the_export_pod_holds_no_account_token_and_reads_the_claim_read_only() -> None:
    spec = job(token=True, emulator=None)["spec"]
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["args"] == [f"/var/lib/society/artifacts/{RUN}", f"gs://b/{RUN}/"]
    claim = next(v for v in pod["volumes"] if v["name"] == "artifacts")
    assert claim["persistentVolumeClaim"] == {"claimName": "society-ledger", "readOnly": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "artifacts")
    assert mount["readOnly"] is True
    token = next(v for v in pod["volumes"] if v["name"] == "token")
    assert token["secret"]["secretName"] == TOKEN_SECRET
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[gcs_ledger.TOKEN_FILE_ENV].startswith("/var/run/society/export-token/")


def test_against_an_emulator_the_job_gets_its_address_and_no_token() -> None:
    pod = job(token=False, emulator="http://10.0.0.1:4443")["spec"]["template"]["spec"]
    assert all(v["name"] != "token" for v in pod["volumes"])
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["STORAGE_EMULATOR_HOST"] == "http://10.0.0.1:4443"
    assert gcs_ledger.TOKEN_FILE_ENV not in env


def test_the_export_egress_is_https_without_the_metadata_server_or_the_emulator_only() -> None:
    gcs = export_policy(RUN, None)["spec"]
    assert gcs["podSelector"] == {"matchLabels": {"society.run/role": "ledger-export"}}
    assert "ingress" not in gcs and gcs["policyTypes"] == ["Ingress", "Egress"]
    https = gcs["egress"][1]
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]
    assert https["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [METADATA_SERVER]}}]
    emulator = export_policy(RUN, "http://10.0.0.1:4443")["spec"]["egress"][1]
    assert emulator == {
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
        "ports": [{"protocol": "TCP", "port": 4443}],
    }


def test_the_token_secret_is_immutable_and_names_the_run() -> None:
    secret = token_secret(RUN, "ya29.token")
    assert secret["immutable"] is True
    assert secret["metadata"]["namespace"] == RUN and secret["metadata"]["name"] == TOKEN_SECRET


def test_the_token_may_only_create_and_read_objects_under_its_runs_prefix() -> None:
    boundary = gcs_ledger.export_boundary("ledgers", f"{RUN}/").to_json()
    (rule,) = boundary["accessBoundary"]["accessBoundaryRules"]
    assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/ledgers"
    assert rule["availablePermissions"] == [
        "inRole:roles/storage.objectCreator",
        "inRole:roles/storage.objectViewer",
    ]
    expression = rule["availabilityCondition"]["expression"]
    assert expression == f"resource.name.startsWith('projects/_/buckets/ledgers/objects/{RUN}/')"
    # a prefix that is not one run's directory would open every run sharing its first characters
    for wide in (RUN, "", "/"):
        with pytest.raises(ValueError, match="run's directory"):
            gcs_ledger.export_boundary("ledgers", wide)


def test_a_pods_report_is_read_as_a_receipt_an_error_or_a_failed_export() -> None:
    receipt = ExportReceipt(f"gs://b/{RUN}/", 9, 1, True, 12, "ledger/main")

    def pod(message: str, code: int = 0) -> dict:
        state = {"terminated": {"exitCode": code, "reason": "Completed", "message": message}}
        return {
            "metadata": {"name": "export-1"},
            "status": {"containerStatuses": [{"name": "export", "state": state}]},
        }

    assert _reported(pod(json.dumps({"receipt": asdict(receipt)}))) == receipt
    assert receipt.ledger_url() == f"gs://b/{RUN}/ledger/main"
    error = _reported(pod(json.dumps({"error": {"reason": "export-conflict", "message": "no"}}), 1))
    assert isinstance(error, LedgerExportError) and error.reason == "export-conflict"
    garbage = _reported(pod("Traceback (most recent call last): ...", 1))
    assert isinstance(garbage, LedgerExportError) and garbage.reason == "export-failed"
    assert "without a report" in str(garbage)
    running = {"metadata": {"name": "x"}, "status": {"containerStatuses": [{"name": "export"}]}}
    assert _reported(running) is None


def test_an_in_cluster_worker_that_exports_refuses_a_run_without_a_ledger_claim(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    module = tmp_path / "m.py"
    module.write_text("run_spec = None\n")
    request = RunRequest(
        module_path=str(module), module_source=ModuleSource.read(module), run_id=RUN,
        profile="gke", artifact_root=str(tmp_path),
    )  # fmt: skip
    monkeypatch.setenv("SOCIETY_LEDGER_EXPORT", "gs://b")
    settings = KubernetesSettings(in_cluster=True, ledger_claim=None)
    with pytest.raises(WorkerRefused) as refused:
        check_worker_request(request, settings)
    assert refused.value.reason == "ledger-claim-missing"
    assert "SOCIETY_LEDGER_PVC" in str(refused.value)
    check_worker_request(request, KubernetesSettings(in_cluster=True, ledger_claim="ledger"))


def test_pushed_images_become_the_charts_worker_image_and_image_map_or_are_refused() -> None:
    from controller.ops.cluster.images import WORKER_IMAGE, chart_image_values
    from controller.ops.cluster.steps import StepFailed

    worker = "r.example/society/worker@sha256:" + "2" * 64
    values = chart_image_values({WORKER_IMAGE: worker, "society/controller:dev": IMAGE})
    assert values["worker"] == {
        "image": {"repository": "r.example/society/worker", "digest": "sha256:" + "2" * 64}
    }
    assert values["imageMap"] == {WORKER_IMAGE: worker, "society/controller:dev": IMAGE}
    with pytest.raises(StepFailed, match="no pinned society/worker:dev"):
        chart_image_values({"society/controller:dev": IMAGE})
    with pytest.raises(StepFailed, match="without a digest"):
        chart_image_values({WORKER_IMAGE: worker, "society/llm:dev": "r.example/llm:latest"})
