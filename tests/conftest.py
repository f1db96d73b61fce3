"""Suite-wide settings: property tests judge behaviour, never the speed of a shared machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("society", deadline=None)
settings.load_profile("society")

# No test installs the local model or OpenClaw: a `society run` whose roster needs a missing one
# fails at once, naming the install command (scripts/test.sh installs both beforehand).
os.environ.setdefault("SOCIETY_NO_INSTALL", "1")

# Work units under pytest-xdist (scripts/test.sh runs `-n 2 --dist loadgroup`): one unit per
# top-level folder of tests/ (a file directly under tests/ is its own), so a folder's session
# fixtures (a Temporal dev server, the example suite's thirty runs, a real run read by many
# tests) are made once, by one worker. tests/kind and tests/kubernetes are one unit, queued
# first: their kind clusters are made one after another, never two beside each other on the
# two cores, and the longest unit starts at once while the other worker takes the rest.
KIND_UNIT = "kind-clusters"
KIND_FOLDERS = frozenset({"kind", "kubernetes"})


def work_unit(path: Path) -> str:
    """The xdist group of a test file under tests/."""
    parts = path.relative_to(Path(__file__).parent).parts
    top = parts[0] if len(parts) > 1 else path.stem
    return KIND_UNIT if top in KIND_FOLDERS else top


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            item.add_marker(pytest.mark.xdist_group(work_unit(item.path)))
    items.sort(key=lambda item: work_unit(item.path) != KIND_UNIT)  # stable: order kept within
