"""What ``execute(ctx)`` receives: agents, network, events, ledger; nothing platform-specific."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from controller.agents.roster import Roster
from ledger.errors import CatalogError
from ledger.events import Event, EventCatalog
from ledger.records import LedgerReceipt, Record
from ledger.writer import LedgerWriter

if TYPE_CHECKING:
    from controller.network.endpoint import Network
    from controller.run.fork import Fork

E = TypeVar("E", bound=Event)

PROGRAM_PRODUCER = "program"


class CustomerEvents:
    """Emit the definition's own event classes; core and runtime classes are refused."""

    __slots__ = ("_catalog", "_writer")

    def __init__(self, writer: LedgerWriter, catalog: EventCatalog) -> None:
        self._writer = writer
        self._catalog = catalog

    async def emit(
        self,
        event: Event,
        *,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Record:
        """Append ``event`` to the ledger; returns once it is durable."""
        if type(event) not in self._catalog:
            raise CatalogError(
                f"{type(event).__qualname__} ({getattr(event, 'tag', '?')}) is not one of this "
                f"RunSpec's event classes; list its catalog in RunSpec.define(events=[...])",
                reason="undeclared-event",
            )
        return await self._writer.append(
            event,
            producer=PROGRAM_PRODUCER,
            causation_id=causation_id,
            correlation_id=correlation_id,
        )

    @property
    def catalog(self) -> EventCatalog:
        return self._catalog


class LedgerView:
    """Read-only committed evidence: ``records()`` catches up, then follows live commits."""

    __slots__ = ("_writer",)

    def __init__(self, writer: LedgerWriter) -> None:
        self._writer = writer

    @property
    def run_id(self) -> str:
        return self._writer.run_id

    @property
    def ref(self) -> str:
        return self._writer.directory.name

    @property
    def record_count(self) -> int:
        return self._writer.record_count

    @property
    def catalog(self) -> EventCatalog:
        return self._writer.catalog

    def receipt(self) -> LedgerReceipt:
        return self._writer.receipt()

    def records(self) -> AsyncIterator[Record]:
        return self._writer.records()

    def events(self, event_class: type[E]) -> AsyncIterator[E]:
        return self._writer.events(event_class)


@dataclass(frozen=True, slots=True)
class RunContext:
    """The four capabilities of a run's program, its parameters and, in a fork, ``fork``."""

    agents: Roster
    network: Network
    """Endpoints, conversations and ``links``."""
    events: CustomerEvents
    ledger: LedgerView
    parameters: Any = None
    """The RunSpec's parameters (an instance of its ``parameters`` model), or ``None``."""
    fork: Fork | None = None
    """A fork's parent, fork point and ``reached()``; ``None`` on a run that is no fork."""
