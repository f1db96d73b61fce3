"""The runtimes Society Runner ships, by name, and the events each contributes to a run's catalog.

The one list a ledger reader consults: ``society ledger verify|show|follow`` decode every shipped
runtime's events without ``--catalog``. A runtime added under ``controller/agents`` belongs here
(``tests/ledger/test_ledger_cli_catalogs.py`` fails for one that is not).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping

from controller.agents.runtime import RuntimeDescriptor
from ledger.events import EventCatalog

SHIPPED_RUNTIMES: Mapping[str, str] = {
    "scripted": "controller.agents.scripted:ScriptedRuntime",
    "llm": "controller.agents.llm:LLMRuntime",
    "openclaw": "controller.agents.openclaw:OpenClawRuntime",
    "nanoclaw": "controller.agents.nanoclaw:NanoClawRuntime",
    "peer": "controller.agents.peer:PeerRuntime",
    "byo": "controller.agents.byo:BYORuntime",
}
"""Runtime name -> ``module:class`` of its descriptor (imported when asked: llm and openclaw
are heavier)."""


def shipped_runtimes() -> dict[str, type[RuntimeDescriptor]]:
    """Each shipped runtime's name and its descriptor class."""
    found: dict[str, type[RuntimeDescriptor]] = {}
    for name, where in SHIPPED_RUNTIMES.items():
        module, _, attribute = where.partition(":")
        descriptor = getattr(importlib.import_module(module), attribute)
        assert issubclass(descriptor, RuntimeDescriptor) and descriptor.runtime == name, where
        found[name] = descriptor
    return found


def default_events(descriptor: type[RuntimeDescriptor]) -> EventCatalog:
    """The events a descriptor class contributes unless a caller overrides them."""
    field = {f.name: f for f in dataclasses.fields(descriptor)}["events"]
    factory = field.default_factory
    default = factory() if factory is not dataclasses.MISSING else field.default
    assert isinstance(default, EventCatalog), descriptor
    return default


def shipped_runtime_catalogs() -> dict[str, EventCatalog]:
    """Each shipped runtime's name and the events it contributes to a run's catalog."""
    return {name: default_events(cls) for name, cls in shipped_runtimes().items()}
