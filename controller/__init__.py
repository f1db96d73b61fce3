"""Society Runner's controller: the experiment API, the router, runtimes, profiles and the CLI.

Public names load lazily so that an agent program importing only ``controller.network.client``
never loads the kernel, Temporal or Kubernetes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'controller' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
