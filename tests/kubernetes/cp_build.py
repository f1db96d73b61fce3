"""Building the test control plane: scripts/build-control-plane.sh, its binaries and manifests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "kind" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-control-plane.sh"
IMAGES_SCRIPT = REPO_ROOT / "scripts" / "build-images.sh"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached; `reason` is machine-readable."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse kind/versions.env (KEY=VALUE lines, '#' comments)."""
    versions: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip().strip("'\"")
    return versions


@dataclass(frozen=True)
class ControlPlaneBuild:
    """A built control plane: binaries under `bin_dir`, CRDs and webhooks under `manifest_dir`."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def manifest_dir(self) -> Path:
        return self.root / "manifests"

    def binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(
                "binary-missing",
                f"{path} is missing; run {BUILD_SCRIPT} to build the control plane",
            )
        return path


def find_go() -> str | None:
    """The `go` command the build script will use, or None (then nothing can be built)."""
    return shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")


def _run_build(script: Path, timeout: float) -> Path:
    """Run a build script (progress to the caller's stderr); its stdout's last line is a path."""
    process = subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        os.killpg(process.pid, signal.SIGKILL)  # the script and the commands it started
        process.wait()
        raise ControlPlaneError(
            "build-timeout", f"{script} ran longer than {timeout:.0f}s"
        ) from exc
    if process.returncode != 0:
        raise ControlPlaneError(
            "build-failed", f"{script} exited {process.returncode}; its output above says why"
        )
    return Path(stdout.strip().splitlines()[-1])


def build_control_plane(*, timeout: float = 3600.0) -> ControlPlaneBuild:
    """Run scripts/build-control-plane.sh (a no-op when built) and return the build."""
    if find_go() is None:
        raise ControlPlaneError(
            "go-missing", "'go' is not on PATH; install Go >= 1.26 to build the control plane"
        )
    return ControlPlaneBuild(_run_build(BUILD_SCRIPT, timeout))


def build_images(*, timeout: float = 3600.0) -> Path:
    """Run scripts/build-images.sh (seconds when nothing changed); the image map's path."""
    return _run_build(IMAGES_SCRIPT, timeout)


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty documents of a manifest file."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open() as handle:
        return [doc for doc in yaml.load_all(handle, Loader=loader) if doc]
