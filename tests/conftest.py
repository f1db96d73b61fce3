"""Suite-wide settings: property tests judge behaviour, never the speed of a shared machine."""

from __future__ import annotations

import os

import pytest
import work_units
from hypothesis import settings

settings.register_profile("society", deadline=None)
settings.load_profile("society")

# No test installs the local model or OpenClaw: a `society run` whose roster needs a missing one
# fails at once, naming the install command (scripts/test.sh installs both beforehand).
os.environ.setdefault("SOCIETY_NO_INSTALL", "1")

# A test's runs share their artifact root's Temporal dev server as a user's do; it stops 20 s
# after the last of them (a user's waits 300 s), so the many roots of a session never pile up.
os.environ.setdefault("SOCIETY_TEMPORAL_IDLE_S", "20")

# Under `--dist loadscope` (scripts/test.sh) a scope is a folder unit of tests/work_units.py;
# the kind clusters' unit is collected first, so the longest unit starts at once.


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadscope":
        return None  # xdist's own scheduler for any other --dist
    return work_units.FolderScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: work_units.unit_of(item.nodeid) != work_units.KIND_UNIT)
