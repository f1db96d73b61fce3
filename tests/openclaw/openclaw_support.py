"""Helpers for the OpenClaw tests."""

from __future__ import annotations

from pathlib import Path

from controller.modelgateway import model_gateway_catalog
from ledger import Event


class RecordingLedger:
    """Keeps the model gateway's appended events in memory (checked against its catalog)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def append(self, event: Event, *, producer: str) -> None:
        model_gateway_catalog.encode(event)
        self.events.append(event)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first), from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(stat[1]), []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def command_line(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""
