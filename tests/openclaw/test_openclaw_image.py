"""The openclaw image pins the same Node and OpenClaw as the install script and the runtime."""

from __future__ import annotations

import re
from pathlib import Path

from society_sandbox.runtimes.openclaw import NODE_VERSION, OPENCLAW_VERSION

ROOT = Path(__file__).resolve().parents[2]


def _assignments(path: Path, pattern: str) -> dict[str, str]:
    return dict(re.findall(pattern, path.read_text(), flags=re.MULTILINE))


def test_the_dockerfile_and_the_install_script_pin_the_runtimes_versions() -> None:
    dockerfile = _assignments(
        ROOT / "agent_images" / "openclaw" / "Dockerfile", r"^ARG (\w+_VERSION)=(\S+)$"
    )
    script = _assignments(ROOT / "scripts" / "install-openclaw.sh", r'^(\w+_VERSION)="(\S+)"$')
    pinned = {"OPENCLAW_VERSION": OPENCLAW_VERSION, "NODE_VERSION": NODE_VERSION}
    assert dockerfile == pinned
    assert script == pinned
