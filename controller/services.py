"""Run-service contracts: what a runtime needs once per run and shares between its agents.

This layer sits below the services (``controller.modelgateway``), the runtimes
(``controller.agents``), the kernel (``controller.run``) and the platforms: it names what a
service gets and grants, never a runtime or a service implementation.

A descriptor lists its services in ``RuntimeDescriptor.services`` (the ``llm`` runtime lists the
model gateway). The kernel opens each distinct service once, after admission and before any agent
starts, and closes it after every agent stopped and before the ledger completes. An open service
grants each of its agents environment variables (not secret) and secrets-file entries (secret),
and reports JSON-safe entries for the run's result (the ``usage`` summary).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ledger.events import Event


class EventAppender(Protocol):
    """The run's ledger as a service sees it: ``append`` returns once the record is durable."""

    async def append(self, event: Event, *, producer: str) -> object: ...


@dataclass(frozen=True, slots=True)
class ServiceScope:
    """What the kernel hands a run service when it opens it."""

    run_id: str
    run_dir: Path
    """The run's directory under the artifact root (service logs go here)."""
    host: str
    """The address to listen on so that the platform's sandboxes reach the service."""
    agents: Mapping[str, object]
    """The roster agents whose runtime descriptors list this service."""
    ledger: EventAppender
    """Where the service records its events; they must be in its runtimes' catalogs."""
    start_local_model: LocalModelStarter | None = None
    """Starts the local model server: the platform owns processes and hands this down; ``None``
    where the platform serves no local model."""


class LocalModel(Protocol):
    """A running local model server (OpenAI-compatible), as a service sees it."""

    @property
    def model_id(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def api_key_name(self) -> str:
        """The name its key has in ``credentials``."""

    @property
    def credentials(self) -> Mapping[str, str]: ...

    @property
    def slots(self) -> int:
        """How many requests it decodes at once."""


class LocalModelStarter(Protocol):
    """``start(n_ctx, log_path, parallel=N)``: an ``async with`` scope that runs the server while
    it is open, with up to ``parallel`` slots of ``n_ctx`` tokens (fewer where the machine is
    small)."""

    def __call__(
        self, n_ctx: int, log_path: Path, /, *, parallel: int = 1
    ) -> AbstractAsyncContextManager[LocalModel]: ...


def _no_report() -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True, slots=True)
class ServiceGrant:
    """What an open service gives its agents and the run's result."""

    environment: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Agent -> variables added to its environment; names are recorded, so no secrets here."""
    credentials: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Agent -> entries added to its secrets file; only the platform ever sees the values."""
    report: Callable[[], Mapping[str, Any]] = _no_report
    """Called once every agent stopped: JSON-safe entries for the run's result."""


class RunService(ABC):
    """A service shared by the agents of one run. Equal services (``==``) open once per run, so
    subclasses are frozen dataclasses."""

    @abstractmethod
    def open(self, scope: ServiceScope) -> AbstractAsyncContextManager[ServiceGrant]:
        """Start the service; leaving the block stops it. Raise an error with a ``reason``
        attribute when it cannot start: the run is then lost before any agent starts."""
