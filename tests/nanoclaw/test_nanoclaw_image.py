"""The nanoclaw image, install script, lockfile and runtime pin the same Node and SDK."""

from __future__ import annotations

import json
import re
from pathlib import Path

from society_sandbox.runtimes.nanoclaw import NODE_VERSION, SDK_VERSION

ROOT = Path(__file__).resolve().parents[2]
SDK = "@anthropic-ai/claude-agent-sdk"


def _assignments(path: Path, pattern: str) -> dict[str, str]:
    return dict(re.findall(pattern, path.read_text(), flags=re.MULTILINE))


def test_the_dockerfile_the_install_script_and_the_lockfile_pin_the_runtimes_versions() -> None:
    pinned = {"SDK_VERSION": SDK_VERSION, "NODE_VERSION": NODE_VERSION}
    dockerfile = _assignments(
        ROOT / "agent_images" / "nanoclaw" / "Dockerfile", r"^ARG (\w+_VERSION)=(\S+)$"
    )
    script = _assignments(ROOT / "scripts" / "install-nanoclaw.sh", r'^(\w+_VERSION)="(\S+)"$')
    assert dockerfile == pinned and script == pinned
    package = json.loads((ROOT / "agent_images" / "nanoclaw" / "package.json").read_text())
    lock = json.loads((ROOT / "agent_images" / "nanoclaw" / "package-lock.json").read_text())
    assert package["dependencies"][SDK] == SDK_VERSION
    assert lock["packages"][f"node_modules/{SDK}"]["version"] == SDK_VERSION
    for name, version in package["dependencies"].items():  # exact pins, every one in the lock
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
    assert all("integrity" in entry for key, entry in lock["packages"].items() if key)
