"""Fixtures for the runtime tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"
