"""Society Runner's controller: the experiment API, the router, runtimes, profiles and the CLI.

Public names load lazily so that an agent program importing only ``controller.network.client``
never loads the kernel, Temporal or Kubernetes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller._lazy import lazy_exports

if TYPE_CHECKING:  # static checkers see the real names; at run time they load on first use
    from controller.events import core_events
    from controller.run import ClusterLost, ProgramFinished, Run, RunSpec
    from ledger.events import Event, EventCatalog

_EXPORTS = {
    "Event": "ledger.events",
    "EventCatalog": "ledger.events",
    "core_events": "controller.events",
    "RunSpec": "controller.run",
    "Run": "controller.run",
    "ProgramFinished": "controller.run",
    "ClusterLost": "controller.run",
}

__all__ = [
    "ClusterLost",
    "Event",
    "EventCatalog",
    "ProgramFinished",
    "Run",
    "RunSpec",
    "core_events",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
