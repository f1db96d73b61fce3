"""Building what the Kubernetes tests run: scripts/build-control-plane.sh (the Kubernetes programs
of the kind node image, KWOK and the pinned CRDs) and scripts/build-images.sh (the project's
images), and the pins they read (kind/versions.env)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "kind" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-control-plane.sh"
IMAGES_SCRIPT = REPO_ROOT / "scripts" / "build-images.sh"


class BuildError(RuntimeError):
    """A build script failed or ran too long; `reason` is machine-readable."""

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


def find_go() -> str | None:
    """The `go` command the build scripts will use, or None (then nothing can be built)."""
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
        raise BuildError("build-timeout", f"{script} ran longer than {timeout:.0f}s") from exc
    if process.returncode != 0:
        raise BuildError(
            "build-failed", f"{script} exited {process.returncode}; its output above says why"
        )
    return Path(stdout.strip().splitlines()[-1])


def build_control_plane(*, timeout: float = 3600.0) -> Path:
    """Run scripts/build-control-plane.sh (a no-op when built); its directory, with ``bin/``
    and ``manifests/`` (the Kueue and Agent Sandbox CRDs under ``*/crds/``, KWOK's stages)."""
    if find_go() is None:
        raise BuildError(
            "go-missing", "'go' is not on PATH; install Go >= 1.26 to build the control plane"
        )
    return _run_build(BUILD_SCRIPT, timeout)


def build_images(*, timeout: float = 3600.0) -> Path:
    """Run scripts/build-images.sh (seconds when nothing changed); the image map's path."""
    return _run_build(IMAGES_SCRIPT, timeout)
