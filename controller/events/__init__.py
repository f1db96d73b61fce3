"""The core event catalog: everything the kernel itself writes. Graders import these classes."""

from __future__ import annotations

from controller.events.network import network_events
from controller.events.run import run_events
from ledger import EventCatalog, ledger_catalog

core_events = EventCatalog.merge(ledger_catalog, network_events, run_events)

__all__ = ["core_events", "network_events", "run_events"]
