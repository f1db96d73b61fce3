"""Society Runner's public surface: everything an experiment, a grader or a suite imports.

A RunSpec module imports what it needs from here: ``RunSpec`` and ``RunContext``, the runtimes
(``scripted``, ``llm``, ``openclaw``, ``nanoclaw``, ``peer``, ``byo``) and their
configuration types, the owner handles ``ctx.agents.NAME.owner`` returns, and the events it
declares (``Event``, ``EventCatalog``). A grader opens a ledger with ``ledger``
(``LedgerArtifacts``, ``open_ledger_artifacts``) and decodes the core events named here. Two
documented modules serve the inside of a sandbox, which has no controller: a peer's policy
imports ``society_sandbox.runtimes.peer``, an agent program its router client from
``society_sandbox.network.client``. ``tests/test_public_surface.py`` holds this list.

Public names load lazily so that importing ``controller`` never loads the kernel, Temporal or
Kubernetes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller._lazy import lazy_exports

if TYPE_CHECKING:  # static checkers see the real names; at run time they load on first use
    from controller.agents.byo import BYOOwner, BYORuntime, byo
    from controller.agents.llm import (
        LLM_RESOURCES,
        LLMAgentConfigured,
        LLMAgentStopped,
        LLMOwner,
        LLMRuntime,
        llm,
    )
    from controller.agents.nanoclaw import NanoClawAgentConfigured, NanoClawRuntime, nanoclaw
    from controller.agents.nanoclaw_owner import NanoClawOwner
    from controller.agents.openclaw import (
        OPENCLAW_TRANSCRIPT,
        OpenClawAgentConfigured,
        OpenClawRuntime,
        openclaw,
    )
    from controller.agents.peer import PeerObservation, PeerObservations, peer
    from controller.agents.scripted import ScriptedOwner, scripted
    from controller.events import core_events
    from controller.events.network import (
        ConversationOpened,
        LinkMessageDropped,
        RouterMessageCommitted,
        delivered_pairs,
    )
    from controller.events.run import AgentWorkspaceFileHarvested, ProgramSucceeded, RunStarted
    from controller.modelgateway.config import ProviderConfig
    from controller.modelgateway.events import (
        AgentModelBudgetReached,
        AgentModelCallFailed,
        AgentModelUsage,
    )
    from controller.run import (
        PlatformLost,
        ProgramFinished,
        Run,
        RunContext,
        RunSpec,
        load_run_spec,
    )
    from controller.run.fork import ForkPoint
    from controller.suites.definition import Suite, load_suite
    from ledger.events import Event, EventCatalog
    from society_sandbox.network.protocol import Delivery
    from society_sandbox.runtimes.llm import Budget, ContextPolicy, ReplyPolicy
    from society_sandbox.runtimes.openclaw_rpc import OpenClawRPC
    from society_sandbox.runtimes.scripted import Opening, ReplyDelay, Rule, ScriptedPolicy

_EXPORTS = {
    # the experiment
    "RunSpec": "controller.run",
    "RunContext": "controller.run",
    "Run": "controller.run",
    "ProgramFinished": "controller.run",
    "PlatformLost": "controller.run",
    "load_run_spec": "controller.run",
    "ForkPoint": "controller.run.fork",
    "Suite": "controller.suites.definition",
    "load_suite": "controller.suites.definition",
    "Event": "ledger.events",
    "EventCatalog": "ledger.events",
    "core_events": "controller.events",
    "Delivery": "society_sandbox.network.protocol",
    # runtimes and their configuration
    "scripted": "controller.agents.scripted",
    "peer": "controller.agents.peer",
    "byo": "controller.agents.byo",
    "llm": "controller.agents.llm",
    "openclaw": "controller.agents.openclaw",
    "nanoclaw": "controller.agents.nanoclaw",
    "ScriptedPolicy": "society_sandbox.runtimes.scripted",
    "Rule": "society_sandbox.runtimes.scripted",
    "Opening": "society_sandbox.runtimes.scripted",
    "ReplyDelay": "society_sandbox.runtimes.scripted",
    "Budget": "society_sandbox.runtimes.llm",
    "ContextPolicy": "society_sandbox.runtimes.llm",
    "ReplyPolicy": "society_sandbox.runtimes.llm",
    "LLMRuntime": "controller.agents.llm",
    "LLM_RESOURCES": "controller.agents.llm",
    "OpenClawRuntime": "controller.agents.openclaw",
    "NanoClawRuntime": "controller.agents.nanoclaw",
    "BYORuntime": "controller.agents.byo",
    "ProviderConfig": "controller.modelgateway.config",
    # owner handles (ctx.agents.NAME.owner)
    "ScriptedOwner": "controller.agents.scripted",
    "LLMOwner": "controller.agents.llm",
    "OpenClawRPC": "society_sandbox.runtimes.openclaw_rpc",
    "NanoClawOwner": "controller.agents.nanoclaw_owner",
    "PeerObservation": "controller.agents.peer",
    "PeerObservations": "controller.agents.peer",
    "BYOOwner": "controller.agents.byo",
    # evidence a grader decodes
    "RunStarted": "controller.events.run",
    "ProgramSucceeded": "controller.events.run",
    "AgentWorkspaceFileHarvested": "controller.events.run",
    "ConversationOpened": "controller.events.network",
    "RouterMessageCommitted": "controller.events.network",
    "LinkMessageDropped": "controller.events.network",
    "delivered_pairs": "controller.events.network",
    "AgentModelUsage": "controller.modelgateway.events",
    "AgentModelCallFailed": "controller.modelgateway.events",
    "AgentModelBudgetReached": "controller.modelgateway.events",
    "LLMAgentConfigured": "controller.agents.llm",
    "LLMAgentStopped": "controller.agents.llm",
    "OpenClawAgentConfigured": "controller.agents.openclaw",
    "OPENCLAW_TRANSCRIPT": "controller.agents.openclaw",
    "NanoClawAgentConfigured": "controller.agents.nanoclaw",
}

__all__ = [
    "LLM_RESOURCES",
    "OPENCLAW_TRANSCRIPT",
    "AgentModelBudgetReached",
    "AgentModelCallFailed",
    "AgentModelUsage",
    "AgentWorkspaceFileHarvested",
    "BYOOwner",
    "BYORuntime",
    "Budget",
    "ContextPolicy",
    "ConversationOpened",
    "Delivery",
    "Event",
    "EventCatalog",
    "ForkPoint",
    "LLMAgentConfigured",
    "LLMAgentStopped",
    "LLMOwner",
    "LLMRuntime",
    "LinkMessageDropped",
    "NanoClawAgentConfigured",
    "NanoClawOwner",
    "NanoClawRuntime",
    "OpenClawAgentConfigured",
    "OpenClawRPC",
    "OpenClawRuntime",
    "Opening",
    "PeerObservation",
    "PeerObservations",
    "PlatformLost",
    "ProgramFinished",
    "ProgramSucceeded",
    "ProviderConfig",
    "ReplyDelay",
    "ReplyPolicy",
    "RouterMessageCommitted",
    "Rule",
    "Run",
    "RunContext",
    "RunSpec",
    "RunStarted",
    "ScriptedOwner",
    "ScriptedPolicy",
    "Suite",
    "byo",
    "core_events",
    "delivered_pairs",
    "llm",
    "load_run_spec",
    "load_suite",
    "nanoclaw",
    "openclaw",
    "peer",
    "scripted",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
