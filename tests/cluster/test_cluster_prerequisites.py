"""``society cluster up`` names every missing program with its next step, before it changes
anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controller.ops.cluster.prerequisites import PrerequisitesMissing, find_programs

SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
REPO = Path(__file__).resolve().parents[2]


def _finder(*present: str):  # type: ignore[no-untyped-def]
    return lambda name: f"/opt/bin/{name}" if name in present else None


def _pinned_kind(kind: Path) -> str:
    return "kind v0.33.0 go1.26.8 linux/amd64"


@pytest.fixture(autouse=True)
def no_built_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No helm from scripts/build-tools.sh either: the tools directory is empty."""
    monkeypatch.setenv("SOCIETY_TOOLS_DIR", str(tmp_path / "no-tools"))


def test_a_kind_cluster_needs_an_engine_kind_kubectl_and_helm_and_each_is_named() -> None:
    with pytest.raises(PrerequisitesMissing) as raised:
        find_programs(
            existing_cluster=False, import_images=False, which=_finder(), version_of=_pinned_kind
        )
    missing = {item.tool: item.next_step for item in raised.value.missing}
    assert set(missing) == {"container engine", "kind", "kubectl", "helm"}
    assert "go install sigs.k8s.io/kind@v0.33.0" in missing["kind"]
    assert "scripts/build-tools.sh" in missing["helm"]
    assert "Docker" in missing["container engine"] and "Podman" in missing["container engine"]
    assert raised.value.reason == "prerequisite-missing"


def test_podman_serves_as_the_container_engine() -> None:
    found = find_programs(
        existing_cluster=False,
        import_images=False,
        which=_finder("podman", "kind", "kubectl", "helm"),
        version_of=_pinned_kind,
    )
    assert found.engine == Path("/opt/bin/podman")


def test_an_existing_cluster_needs_helm_only_and_ctr_when_images_are_imported() -> None:
    found = find_programs(existing_cluster=True, import_images=False, which=_finder("helm"))
    assert found.kind is None and found.engine is None and found.kubectl is None
    with pytest.raises(PrerequisitesMissing) as raised:
        find_programs(existing_cluster=True, import_images=True, which=_finder("helm"))
    assert [item.tool for item in raised.value.missing] == ["ctr"]


def test_helm_from_the_build_tools_directory_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controller.ops.checks import tools

    monkeypatch.setenv("SOCIETY_TOOLS_DIR", str(tmp_path / "tools"))
    helm = tools.tools_dir() / "bin" / "helm"
    helm.parent.mkdir(parents=True)
    helm.write_text("#!/bin/sh\n")
    helm.chmod(0o755)
    assert find_programs(existing_cluster=True, import_images=False, which=_finder()).helm == helm


def test_the_command_with_a_path_lacking_every_tool_exits_2_and_changes_nothing(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    artifacts = tmp_path / "artifacts"
    done = subprocess.run(
        [*SOCIETY, "cluster", "up", "--profile", "kind", "--artifacts", str(artifacts)],
        env={"PATH": str(empty), "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
             "SOCIETY_TOOLS_DIR": str(tmp_path / "no-tools")},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    for tool in ("container engine", "kind", "kubectl", "helm"):
        assert f"  - {tool}: not found; " in done.stderr, done.stderr
    assert "nothing was changed" in done.stderr
    assert done.stdout == "" and not artifacts.exists()


def test_down_with_no_profile_file_says_there_is_nothing_to_remove(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SOCIETY, "cluster", "down", "--profile", "kind", "--artifacts", str(tmp_path)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "nothing to remove" in done.stderr, done.stderr


def test_a_kind_of_another_release_is_named_with_the_pinned_one(tmp_path: Path) -> None:
    kind = tmp_path / "kind"
    kind.write_text("#!/bin/sh\necho 'kind v0.20.0 go1.20.4 linux/amd64'\n")
    kind.chmod(0o755)

    def which(name: str) -> str | None:
        return str(kind) if name == "kind" else f"/opt/bin/{name}"

    with pytest.raises(PrerequisitesMissing) as raised:
        find_programs(existing_cluster=False, import_images=False, which=which)
    [wrong] = raised.value.missing
    assert (
        wrong.tool == "kind" and "`kind v0.20.0 go1.20.4 linux/amd64`, not v0.33.0" in wrong.line()
    )
    assert "go install sigs.k8s.io/kind@v0.33.0" in wrong.line()
    kind.write_text("#!/bin/sh\necho 'kind v0.33.0 go1.26.8 linux/amd64'\n")
    assert find_programs(existing_cluster=False, import_images=False, which=which).kind == kind
