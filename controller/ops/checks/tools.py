"""Where the profile-check tools live: built by ``scripts/build-tools.sh`` into a directory keyed
by the hash of ``scripts/tool-versions.env``, so a pin change never reuses an old binary."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import controller.settings as settings
from controller.errors import OpsError
from controller.ops.repository import ROOT as REPO

VERSIONS_FILE = REPO / "scripts" / "tool-versions.env"
BUILD_COMMAND = "scripts/build-tools.sh"
TOOLS_DIR_ENV = settings.TOOLS_DIR.name
SHELLCHECK_INSTALL = "scripts/install-shellcheck.sh"


class ToolMissing(OpsError):
    """A tool the checks need is not built; ``reason`` is ``tool-missing``."""

    reason = "tool-missing"


def _missing(tool: str, expected: Path, install: str = BUILD_COMMAND) -> ToolMissing:
    return ToolMissing(
        f"{tool} is not installed at {expected}",
        next_step=f"install it with `{install}` (from the repository root) and retry",
    )


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of a versions file (comments and blank lines skipped)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def tools_dir() -> Path:
    """The directory ``scripts/build-tools.sh`` builds into (same rule as the script)."""
    digest = hashlib.sha256(VERSIONS_FILE.read_bytes()).hexdigest()[:16]
    base = settings.current().get(TOOLS_DIR_ENV) or str(Path.home() / ".cache/society-runner/tools")
    return Path(base) / digest


def tool(name: str) -> Path:
    """The pinned build of ``name``; raises ``ToolMissing`` naming the command that builds it."""
    path = tools_dir() / "bin" / name
    if not os.access(path, os.X_OK):
        raise _missing(name, path)
    return path


def shellcheck() -> Path:
    """Debian's shellcheck (installed by ``scripts/install-shellcheck.sh``)."""
    found = shutil.which("shellcheck")
    if found is None:
        raise _missing("shellcheck", Path("/usr/bin/shellcheck"), SHELLCHECK_INSTALL)
    return Path(found)


def hcl_parser() -> Any:
    """The ``hcl2`` module (python-hcl2); ``ToolMissing`` naming the extra that installs it."""
    try:
        import hcl2
    except ImportError:
        raise _missing(
            "python-hcl2", Path("site-packages"), "pip install 'society-runner[profiles]'"
        ) from None
    return hcl2
