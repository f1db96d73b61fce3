"""Fixtures for bring-your-own-agent runs: real local runs in a temporary artifact root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture
def artifact_root(tmp_path: Path) -> Path:
    root = tmp_path / "artifacts"
    root.mkdir()
    return root
