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
    """No helm from scripts/build-tools.sh nor kind from scripts/install-kind.sh either: their
    directories are empty."""
    monkeypatch.setenv("SOCIETY_TOOLS_DIR", str(tmp_path / "no-tools"))
    monkeypatch.setenv("SOCIETY_KIND_DIR", str(tmp_path / "no-kind"))


def _answers(_engine: Path) -> bool:
    return True


def test_kind_where_install_kind_put_it_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controller.settings import Settings, installed

    monkeypatch.setenv("SOCIETY_KIND_DIR", str(tmp_path / "kind"))
    kind = tmp_path / "kind" / "v0.33.0" / "bin" / "kind"
    kind.parent.mkdir(parents=True)
    kind.write_text("#!/bin/sh\n")
    kind.chmod(0o755)
    with installed(Settings.read()):
        found = find_programs(
            existing_cluster=False,
            import_images=False,
            which=_finder("podman", "kubectl", "helm"),
            version_of=_pinned_kind,
            answers=_answers,
        )
    assert found.kind == kind


def test_a_docker_cli_whose_daemon_does_not_answer_gives_way_to_podman_or_is_named() -> None:
    """A docker CLI on PATH with no daemon behind it: podman is taken where it is there; alone,
    docker is named with the fix, not left for kind to fail on."""
    silent = lambda _engine: False  # noqa: E731
    found = find_programs(
        existing_cluster=False,
        import_images=False,
        which=_finder("docker", "podman", "kind", "kubectl", "helm"),
        version_of=_pinned_kind,
        answers=silent,
    )
    assert found.engine == Path("/opt/bin/podman")
    with pytest.raises(PrerequisitesMissing) as raised:
        find_programs(
            existing_cluster=False,
            import_images=False,
            which=_finder("docker", "kind", "kubectl", "helm"),
            version_of=_pinned_kind,
            answers=silent,
        )
    [docker] = raised.value.missing
    assert "/opt/bin/docker is there but its daemon does not answer `docker info`" in docker.line()
    assert "--provider podman" in docker.line()
    answered = find_programs(
        existing_cluster=False,
        import_images=False,
        which=_finder("docker", "podman", "kind", "kubectl", "helm"),
        version_of=_pinned_kind,
        answers=_answers,
    )
    assert answered.engine == Path("/opt/bin/docker")


def test_a_kind_cluster_needs_an_engine_kind_kubectl_and_helm_and_each_is_named() -> None:
    with pytest.raises(PrerequisitesMissing) as raised:
        find_programs(
            existing_cluster=False, import_images=False, which=_finder(), version_of=_pinned_kind
        )
    missing = {item.tool: item.next_step for item in raised.value.missing}
    assert set(missing) == {"container engine", "kind", "kubectl", "helm"}
    assert missing["kind"].startswith("`scripts/install-kind.sh` (builds kind v0.33.0")
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


def test_an_engine_answers_when_its_info_succeeds() -> None:
    from controller.ops.cluster.prerequisites import engine_answers

    assert engine_answers(Path("/bin/true")) and not engine_answers(Path("/bin/false"))
    assert not engine_answers(Path("/nonexistent/docker"))
