"""A controller Job's run directory comes home: the claim's volume, seen from this machine
through the volume mapping, is copied into the artifact root, and the result names the copy."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from controller.incluster import access
from controller.incluster.ledger_home import (
    LedgerHomeError,
    bring_home,
    host_directory,
    volume_path,
)
from controller.ops.cluster import kind
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.run import RunResult
from ledger.records import LedgerReceipt

RUN = "sr-" + "0" * 32
POD_LEDGER = f"{access.ARTIFACT_ROOT}/{RUN}/ledger/main"


class Progress:
    def __init__(self) -> None:
        self.lines = io.StringIO()

    def phase(self, text: str) -> None:
        self.lines.write(text + "\n")


class FakeKube:
    """Only ``get``, over a dict of objects: the claim and its volume (no API server here)."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    async def get(self, kind: str, name: str, namespace: str | None = None) -> Any:
        return self.objects.get((kind, name))


def _result() -> RunResult:
    receipt = LedgerReceipt(ledger_dir=POD_LEDGER, run_id=RUN, record_count=3, head_digest="h",
                            public_key="k", complete=True)  # fmt: skip
    return RunResult(outcome="ProgramFinished", exit="success", run_id=RUN, ledger_dir=POD_LEDGER,
                     receipt=receipt, records=3, public_key="k")  # fmt: skip


def _settings(node_root: str, host_root: str) -> KubernetesSettings:
    return KubernetesSettings(ledger_claim="ledger", ledger_node_root=node_root,
                              ledger_host_root=host_root)  # fmt: skip


def _cluster(volume_spec: dict[str, Any]) -> FakeKube:
    return FakeKube({
        ("PersistentVolumeClaim", "ledger"): {"spec": {"volumeName": "pvc-1"}},
        ("PersistentVolume", "pvc-1"): {"spec": volume_spec},
    })  # fmt: skip


def test_the_run_directory_is_copied_home_and_the_result_names_the_copy(tmp_path: Path) -> None:
    host = tmp_path / "volumes"
    on_volume = host / "pvc-1_sr_ledger" / RUN / "ledger" / "main"
    on_volume.mkdir(parents=True)
    (on_volume / "records.jsonl").write_text("{}\n")
    kube = _cluster({"hostPath": {"path": "/var/local-path-provisioner/pvc-1_sr_ledger"}})
    root, progress = tmp_path / "artifacts", Progress()
    result = anyio.run(
        bring_home, kube, _result(), _settings("/var/local-path-provisioner", str(host)),
        root, progress,
    )  # fmt: skip
    local = root / RUN / "ledger" / "main"
    assert result.ledger_dir == str(local) == result.receipt.ledger_dir
    assert (local / "records.jsonl").read_text() == "{}\n"
    assert f"copied the run directory home to {root / RUN}" in progress.lines.getvalue()


def test_without_a_mapping_nothing_is_copied_and_the_result_keeps_the_pods_path(
    tmp_path: Path,
) -> None:
    settings = KubernetesSettings(ledger_claim="ledger")
    result = anyio.run(bring_home, FakeKube({}), _result(), settings, tmp_path, Progress())
    assert result.ledger_dir == POD_LEDGER and not (tmp_path / RUN).exists()


def test_a_volume_outside_the_mapping_or_without_the_ledger_is_refused_by_name(
    tmp_path: Path,
) -> None:
    elsewhere = _cluster({"local": {"path": "/mnt/disks/ssd0"}})
    with pytest.raises(LedgerHomeError, match="outside SOCIETY_LEDGER_NODE_ROOT"):
        anyio.run(bring_home, elsewhere, _result(), _settings("/var/lp", str(tmp_path)),
                  tmp_path, Progress())  # fmt: skip
    empty = _cluster({"hostPath": {"path": "/var/lp/pvc-1"}})
    with pytest.raises(LedgerHomeError, match="no ledger at"):
        anyio.run(bring_home, empty, _result(), _settings("/var/lp", str(tmp_path)),
                  tmp_path, Progress())  # fmt: skip
    unbound = FakeKube({("PersistentVolumeClaim", "ledger"): {"spec": {}}})
    with pytest.raises(LedgerHomeError, match="bound to no directory volume"):
        anyio.run(bring_home, unbound, _result(), _settings("/var/lp", str(tmp_path)),
                  tmp_path, Progress())  # fmt: skip


def test_paths_map_only_under_the_node_root() -> None:
    assert host_directory("/var/lp/a/b", "/var/lp", "/h") == Path("/h/a/b")
    assert host_directory("/var/lpx/a", "/var/lp", "/h") is None
    assert volume_path({"spec": {"nfs": {"path": "/x"}}}) is None


def test_kind_mounts_the_ledgers_volumes_on_every_node_and_keeps_them(tmp_path: Path) -> None:
    config = yaml.safe_load(kind.cluster_config(tmp_path))
    for node in config["nodes"]:
        assert {"hostPath": str(tmp_path), "containerPath": kind.LOCAL_PATH_DIR} in node[
            "extraMounts"
        ]
    assert config["nodes"][0]["extraPortMappings"]  # the rest of kind/cluster.yaml is kept
    storage = kind.ledger_storage_class()
    assert storage["reclaimPolicy"] == "Retain"
    assert storage["provisioner"] == kind.LOCAL_PATH_PROVISIONER


def test_only_the_controller_jobs_signer_container_mounts_the_operator_key() -> None:
    job = access.controller_job(
        RUN, image="i@sha256:" + "0" * 64, module_name="m.py", seed=None, profile="kind",
        cluster_queue="q", active_deadline_s=60, signing_key_secret=access.SIGNING_SECRET,
    )  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    [controller] = pod["containers"]
    [signer] = pod["initContainers"]
    assert signer["name"] == access.SIGNER_CONTAINER
    assert signer["restartPolicy"] == "Always"  # a native sidecar: it outlives no controller
    assert signer["command"][-3:] == [access.SIGNER_SOCKET, RUN, f"{access.SIGNING_DIR}/key.pem"]
    key_mount = next(m for m in signer["volumeMounts"] if m["mountPath"] == access.SIGNING_DIR)
    assert key_mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == key_mount["name"])
    assert volume["secret"]["secretName"] == access.SIGNING_SECRET
    # the controller's container, where the module runs, has the signer's socket and no key
    assert all(m["name"] != key_mount["name"] for m in controller["volumeMounts"])
    env = {e["name"]: e["value"] for e in controller["env"]}
    assert "SOCIETY_SIGNING_KEY" not in env
    assert env["SOCIETY_SIGNER_SOCKET"] == access.SIGNER_SOCKET
    shared = {m["name"] for m in controller["volumeMounts"]} & {
        m["name"] for m in signer["volumeMounts"]
    }
    assert shared == {"signer"}
    secret = access.signing_key_secret(RUN, b"pem")
    assert secret["immutable"] is True and secret["metadata"]["namespace"] == RUN
    unsigned = access.controller_job(
        RUN, image="i@sha256:" + "0" * 64, module_name="m.py", seed=None, profile="kind",
        cluster_queue="q", active_deadline_s=60,
    )  # fmt: skip
    assert "SOCIETY_SIGNING_KEY" not in str(unsigned) and "initContainers" not in str(unsigned)
