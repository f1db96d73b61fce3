"""Society Runner's controller: the experiment API, the router, runtimes, profiles and the CLI.

A RunSpec module imports what it needs from here: ``RunSpec`` and ``RunContext``, the runtimes
(``scripted``, ``llm``, ``openclaw``, ``nanoclaw``, ``peer``), the scripted policy's parts
(``ScriptedPolicy``, ``Rule``, ``Opening``, ``ReplyDelay``), events (``Event``, ``EventCatalog``,
``core_events``) and the outcomes. Graders open ledgers with ``ledger`` and decode core events from
``controller.events``; a peer's policy module imports ``agent_images.peer.policy``.

Public names load lazily so that an agent program importing only ``controller.network.client``
never loads the kernel, Temporal or Kubernetes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller._lazy import lazy_exports

if TYPE_CHECKING:  # static checkers see the real names; at run time they load on first use
    from agent_images.scripted.policy import Opening, ReplyDelay, Rule, ScriptedPolicy
    from controller.agents import peer, scripted
    from controller.agents.llm import llm
    from controller.agents.nanoclaw import nanoclaw
    from controller.agents.openclaw import openclaw
    from controller.events import core_events
    from controller.run import (
        PlatformLost,
        ProgramFinished,
        Run,
        RunContext,
        RunSpec,
        load_run_spec,
    )
    from ledger.events import Event, EventCatalog

_EXPORTS = {
    "Event": "ledger.events",
    "EventCatalog": "ledger.events",
    "core_events": "controller.events",
    "RunSpec": "controller.run",
    "Run": "controller.run",
    "ProgramFinished": "controller.run",
    "PlatformLost": "controller.run",
    "RunContext": "controller.run",
    "load_run_spec": "controller.run",
    "scripted": "controller.agents",
    "peer": "controller.agents",
    "llm": "controller.agents.llm",
    "openclaw": "controller.agents.openclaw",
    "nanoclaw": "controller.agents.nanoclaw",
    "ScriptedPolicy": "agent_images.scripted.policy",
    "Rule": "agent_images.scripted.policy",
    "Opening": "agent_images.scripted.policy",
    "ReplyDelay": "agent_images.scripted.policy",
}

__all__ = [
    "Event",
    "EventCatalog",
    "Opening",
    "PlatformLost",
    "ProgramFinished",
    "ReplyDelay",
    "Rule",
    "Run",
    "RunContext",
    "RunSpec",
    "ScriptedPolicy",
    "core_events",
    "llm",
    "load_run_spec",
    "nanoclaw",
    "openclaw",
    "peer",
    "scripted",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
