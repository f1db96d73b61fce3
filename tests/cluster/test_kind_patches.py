"""Host patches merge into a copy of ``kind/cluster.yaml``; the user's file stays as it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from controller.ops.cluster.kind_patches import (
    CI_HOST_PATCHES,
    KindPatchRefused,
    patched_config,
)

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "kind" / "cluster.yaml"


def test_the_ci_host_patches_append_to_the_users_config_and_keep_its_nodes() -> None:
    original = CLUSTER_YAML.read_text()
    user = yaml.safe_load(original)
    config = yaml.safe_load(patched_config(original, CI_HOST_PATCHES))
    assert CLUSTER_YAML.read_text() == original
    assert config["nodes"] == user["nodes"]
    assert (
        config["containerdConfigPatches"][: len(user["containerdConfigPatches"])]
        == (user["containerdConfigPatches"])
    )
    patches = "\n".join(config["containerdConfigPatches"] + config["kubeadmConfigPatches"])
    assert "restrict_oom_score_adj = true" in patches
    assert "failCgroupV1: false" in patches
    assert config["networking"] == user["networking"]


def test_mappings_merge_by_key_and_a_scalar_replaces(tmp_path: Path) -> None:
    patches = tmp_path / "patches.yaml"
    patches.write_text("networking:\n  podSubnet: 10.250.0.0/16\n  disableDefaultCNI: true\n")
    config = yaml.safe_load(patched_config(CLUSTER_YAML.read_text(), patches))
    assert config["networking"] == {"disableDefaultCNI": True, "podSubnet": "10.250.0.0/16"}


def test_a_patch_of_nodes_is_refused_with_the_next_step(tmp_path: Path) -> None:
    patches = tmp_path / "patches.yaml"
    patches.write_text("nodes:\n  - role: worker\n")
    with pytest.raises(KindPatchRefused) as refused:
        patched_config(CLUSTER_YAML.read_text(), patches)
    assert refused.value.reason == "kind-patch-refused"
    assert "kubeadmConfigPatches" in str(refused.value)


@pytest.mark.parametrize("text", ["- a list\n", "key: [unclosed\n"])
def test_a_patch_file_that_is_no_mapping_is_refused(tmp_path: Path, text: str) -> None:
    patches = tmp_path / "patches.yaml"
    patches.write_text(text)
    with pytest.raises(KindPatchRefused):
        patched_config(CLUSTER_YAML.read_text(), patches)


def test_cluster_up_s_host_patches_reach_kinds_config_and_podman_with_the_ledger_mounts(
    tmp_path: Path,
) -> None:
    from controller.ops.cluster.kind import CI_HOST_DIR, LOCAL_PATH_DIR, KindHost

    host = KindHost(kind=Path("kind"), engine=Path("/usr/bin/podman"), host_patches=CI_HOST_DIR)
    config = yaml.safe_load(host.config(tmp_path))
    patches = "\n".join(config["containerdConfigPatches"])
    assert "restrict_oom_score_adj = true" in patches
    mount = {"hostPath": str(tmp_path), "containerPath": LOCAL_PATH_DIR}
    assert all(mount in node["extraMounts"] for node in config["nodes"])
    env = host.env()
    assert env["KIND_EXPERIMENTAL_PROVIDER"] == "podman"
    assert env["CONTAINERS_CONF"] == str((CI_HOST_DIR / "containers.conf").resolve())
    plain = KindHost(kind=Path("kind"), engine=Path("/usr/bin/docker"))
    assert "restrict_oom_score_adj" not in plain.config(tmp_path)
    assert "CONTAINERS_CONF" not in plain.env() or plain.env()["CONTAINERS_CONF"] == os.environ.get(
        "CONTAINERS_CONF"
    )
