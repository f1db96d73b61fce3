"""One name for the artifact root's environment variable: ``SOCIETY_ARTIFACTS``, everywhere."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from controller.cli.run_commands import ARTIFACTS_ENV
from controller.incluster.access import controller_job
from controller.incluster.main import request_from_environment
from controller.run.kernel import default_artifact_root
from controller.settings import ARTIFACTS

ROOT = Path(__file__).resolve().parent.parent
OLD_NAME = "SOCIETY_ARTIFACT" + "_ROOT"


def test_the_cli_the_kernel_and_the_cluster_share_one_name() -> None:
    assert ARTIFACTS_ENV == ARTIFACTS.name == "SOCIETY_ARTIFACTS"


def test_the_kernel_reads_society_artifacts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SOCIETY_ARTIFACTS", str(tmp_path))
    assert default_artifact_root() == tmp_path


def test_the_in_cluster_controller_is_given_and_reads_society_artifacts() -> None:
    job = controller_job(
        "sr-" + "0" * 32,
        image="controller:dev",
        module_name="m.py",
        seed=None,
        profile="kind",
        cluster_queue="q",
        active_deadline_s=60,
    )
    env = {
        item["name"]: item["value"]
        for container in job["spec"]["template"]["spec"]["containers"]
        for item in container.get("env", [])
    }
    assert "SOCIETY_ARTIFACTS" in env and OLD_NAME not in env
    request = request_from_environment(
        {
            "SOCIETY_RUN_MODULE": "/runspec/m.py",
            "SOCIETY_RUN_ID": "sr-" + "0" * 32,
            "SOCIETY_ARTIFACTS": "/data/artifacts",
        }
    )
    assert request.artifact_root == "/data/artifacts"


def test_no_file_in_the_repository_names_the_old_variable() -> None:
    found = subprocess.run(
        ["git", "grep", "-l", OLD_NAME], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert found.returncode == 1, found.stdout
