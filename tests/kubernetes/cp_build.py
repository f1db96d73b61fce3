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


def build_control_plane(*, timeout: float = 3600.0) -> ControlPlaneBuild:
    """Run scripts/build-control-plane.sh (a no-op when built) and return the build."""
    if find_go() is None:
        raise ControlPlaneError(
            "go-missing", "'go' is not on PATH; install Go >= 1.26 to build the control plane"
        )
    # Progress goes straight to the caller's stderr; stdout's last line is the directory.
    script = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, _ = script.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        os.killpg(script.pid, signal.SIGKILL)  # the script and the go commands it started
        script.wait()
        raise ControlPlaneError(
            "build-timeout", f"{BUILD_SCRIPT} ran longer than {timeout:.0f}s"
        ) from exc
    if script.returncode != 0:
        raise ControlPlaneError(
            "build-failed", f"{BUILD_SCRIPT} exited {script.returncode}; its output above says why"
        )
    return ControlPlaneBuild(Path(stdout.strip().splitlines()[-1]))


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty documents of a manifest file."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open() as handle:
        return [doc for doc in yaml.load_all(handle, Loader=loader) if doc]
