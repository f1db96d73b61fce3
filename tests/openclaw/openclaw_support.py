"""Helpers for the OpenClaw tests."""

from __future__ import annotations

from controller.modelgateway import model_gateway_catalog
from ledger import Event


class RecordingLedger:
    """Keeps the model gateway's appended events in memory (checked against its catalog)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def append(self, event: Event, *, producer: str) -> None:
        model_gateway_catalog.encode(event)
        self.events.append(event)
