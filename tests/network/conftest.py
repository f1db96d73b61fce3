"""Fixtures for the network tests: a real ledger and a real router on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from network_support import make_ledger

from controller.network.router import Router
from ledger import LedgerWriter


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[LedgerWriter]:
    async with make_ledger(tmp_path / "ledger") as writer:
        yield writer


@pytest.fixture
async def router(ledger: LedgerWriter) -> AsyncIterator[Router]:
    async with Router.serve(ledger, heartbeat_interval=5.0, heartbeat_timeout=15.0) as served:
        yield served
