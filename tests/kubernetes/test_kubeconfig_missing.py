"""A cluster profile with no kubeconfig file: one typed error that names the missing file and the
next step, and none of the client library's stray output. No control plane needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.platforms.kubernetes.preflight import ClusterUnavailable, check_cluster
from controller.platforms.kubernetes.settings import KubernetesSettings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "negotiation.py"


def _pythonpath() -> dict[str, str]:
    """The checkout under test, also for the ``society`` subprocess."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path} if path else {}


def test_society_run_profile_kind_without_kubeconfig_names_the_file_and_the_next_step(
    tmp_path: Path,
) -> None:
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "society"), "run", str(EXAMPLE), "--profile", "kind"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **_pythonpath()},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stdout == ""
    expected = tmp_path / ".kube" / "config"
    assert f"no kubeconfig at {expected}" in completed.stderr
    assert "society cluster up --profile kind" in completed.stderr
    assert "KUBECONFIG" in completed.stderr
    assert "Config not found" not in completed.stderr
    assert "current-context" not in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "artifacts").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_every_file_in_kubeconfig_missing_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    with pytest.raises(ClusterUnavailable) as raised:
        await check_cluster(KubernetesSettings.from_environment({}))
    assert raised.value.reason == "kubeconfig-missing"
    assert str(first) in str(raised.value) and str(second) in str(raised.value)
