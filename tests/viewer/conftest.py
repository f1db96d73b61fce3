"""Real runs and a real browser: Debian's Chromium driven by Playwright (never its download)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from viewer_support import CHROMIUM, CHROMIUM_ARGS, ROOT, society


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-browser.sh (Debian's chromium)")
    from playwright.sync_api import sync_playwright

    # Module scope: Playwright's sync API runs an event loop in this thread while it is open,
    # which must be gone before any later test calls anyio.run or asyncio.run.
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def partition_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of examples/partition.py: its links drop messages during ticks 4-6."""
    root = tmp_path_factory.mktemp("partition")
    result = society("run", str(ROOT / "examples" / "partition.py"), "--artifacts", str(root))
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(json.loads(result.stdout)["ledger"]).parents[1]


@pytest.fixture
def run_copy(partition_run: Path, tmp_path: Path) -> Path:
    target = tmp_path / partition_run.name
    shutil.copytree(partition_run, target)
    return target
