"""The profile file ``cluster up`` writes: a run reads it for what its environment lacks, and a
variable the user set always wins, with its group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.platforms.kubernetes.images import ImageMap
from controller.platforms.kubernetes.profile_file import (
    ClusterProfile,
    ProfileFileError,
    apply_profile,
    profile_path,
    write_profile,
)
from controller.platforms.kubernetes.settings import KubernetesSettings

DIGEST = "sha256:" + "ab" * 32


def _profile() -> ClusterProfile:
    return ClusterProfile(
        profile="kind",
        kubeconfig="/root/a/.cluster/kind.kubeconfig",
        cluster_queue="society-agents",
        images={"society/scripted:dev": f"localhost:5001/society/scripted@{DIGEST}"},
        temporal_address="127.0.0.1:17233",
        temporal_ui_url="http://127.0.0.1:18233",
        agent_node_selector={"society.run/pool": "agents"},
        existing_cluster=False,
        made_cluster=True,
    )


def test_a_run_without_environment_takes_every_setting_from_the_file(tmp_path: Path) -> None:
    path = write_profile(tmp_path, _profile())
    assert path == profile_path(tmp_path, "kind") and oct(path.stat().st_mode)[-3:] == "600"
    env: dict[str, str] = {}
    filled = apply_profile(tmp_path, "kind", env)
    assert env == filled
    settings = KubernetesSettings.from_environment(env)
    assert settings.kubeconfig == "/root/a/.cluster/kind.kubeconfig"
    assert settings.agent_node_selector == {"society.run/pool": "agents"}
    assert ImageMap.parse(settings.image_map).resolve("society/scripted:dev").endswith(DIGEST)
    assert env["TEMPORAL_ADDRESS"] == "127.0.0.1:17233"


def test_a_variable_the_user_set_wins_with_its_group(tmp_path: Path) -> None:
    write_profile(tmp_path, _profile())
    env = {"TEMPORAL_ADDRESS": "temporal.example:7233", "SOCIETY_CLUSTER_QUEUE": "mine"}
    apply_profile(tmp_path, "kind", env)
    assert env["TEMPORAL_ADDRESS"] == "temporal.example:7233"
    assert "TEMPORAL_UI_URL" not in env and "TEMPORAL_NAMESPACE" not in env
    assert env["SOCIETY_CLUSTER_QUEUE"] == "mine"
    assert env["SOCIETY_KUBECONFIG"] == "/root/a/.cluster/kind.kubeconfig"


def test_no_file_fills_nothing_and_a_broken_one_says_how_to_rewrite_it(tmp_path: Path) -> None:
    assert apply_profile(tmp_path, "kind", {}) == {}
    path = profile_path(tmp_path, "kind")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"profile": "kind"}))
    with pytest.raises(ProfileFileError, match="society cluster up --profile kind"):
        apply_profile(tmp_path, "kind", {})


def test_a_kind_profile_keeps_each_runs_ledger_on_a_retained_volume_copied_home(
    tmp_path: Path,
) -> None:
    volumes = str(tmp_path / ".cluster" / "kind-volumes")
    profile = _profile().model_copy(
        update={
            "ledger_storage_class": "society-ledgers",
            "ledger_node_root": "/var/local-path-provisioner",
            "ledger_host_root": volumes,
        }
    )
    write_profile(tmp_path, profile)
    env: dict[str, str] = {}
    apply_profile(tmp_path, "kind", env)
    settings = KubernetesSettings.from_environment(env)
    assert settings.ledger_claim == "ledger"
    assert settings.ledger_storage_class == "society-ledgers"
    assert (settings.ledger_node_root, settings.ledger_host_root) == (
        "/var/local-path-provisioner",
        volumes,
    )
    # A claim of the user's own keeps the file's class and mapping out.
    mine = {"SOCIETY_LEDGER_PVC": "mine"}
    apply_profile(tmp_path, "kind", mine)
    assert "SOCIETY_LEDGER_STORAGE_CLASS" not in mine and "SOCIETY_LEDGER_HOST_ROOT" not in mine
