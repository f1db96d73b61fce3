"""Fixtures for the model gateway: a scripted fake provider and an in-memory ledger."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_provider import FakeProviderServer

from controller.modelgateway import model_gateway_catalog
from ledger import Event


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake_provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


class RecordingLedger:
    """Keeps appended events in memory; refuses events outside the gateway's catalog."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.producers: list[str] = []

    async def append(self, event: Event, *, producer: str) -> None:
        model_gateway_catalog.encode(event)
        self.events.append(event)
        self.producers.append(producer)


@pytest.fixture
def ledger() -> RecordingLedger:
    return RecordingLedger()
