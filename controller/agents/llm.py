"""The ``llm`` runtime, controller side: its descriptor, its bridge (``LLMOwner``), its events.

The agent program is ``LLM_COMMAND``. It holds no provider key: the run's model
service (``controller.modelgateway.service.ModelService``) starts one gateway for the run, and
the local SmolLM2 server when an agent names no provider, and gives each agent its own token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from controller.agents.bridge import BridgeOwner, OwnerError, attach_bridge
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    SecretRef,
    checked_options,
)
from controller.modelgateway.config import ProviderConfig, named_provider
from controller.modelgateway.events import model_gateway_catalog
from controller.modelgateway.service import MODEL_SERVICE
from controller.services import RunService
from ledger.events import Event, EventCatalog
from society_sandbox.runtimes.llm import (
    CONFIG_FILE,
    IDENTITY_FILE,
    INSTRUCTIONS_FILE,
    TRANSCRIPT_FILE,
    Budget,
    ContextPolicy,
    LLMConfig,
    ReplyPolicy,
)

LLM_IMAGE = "society/llm:dev"
"""The locally built image; cluster profiles need it pinned by digest (``image=...@sha256:...``)."""
LLM_COMMAND = ("python", "-m", "agent_images.llm")
LLM_RESOURCES = Resources(cpu=0.05, memory_mib=96, memory_limit_mib=1536)
"""The agent process only talks; the model's CPU is the run's model server's."""


class LLMAgentConfigured(Event):
    """An llm agent is up: the model it was given, its budgets, how it bounds its context."""

    tag: ClassVar[str] = "society.llm-agent-configured/v1"

    agent: str
    model: str
    budget: Budget
    context: ContextPolicy
    context_policy: str
    """The truncation policy in words."""
    reply: ReplyPolicy


class LLMAgentStopped(Event):
    """An llm agent stopped by itself and said why.

    ``reason``: ``token-budget``, ``turn-budget``, ``wall-time-budget``, ``owner``,
    ``run-teardown``, ``model-use-ended``, ``model-unavailable``, ``router-closed``,
    ``router-lost``, ``signal`` or ``error``. Token counts are the gateway's, as the agent was told
    them; the gateway's own ``AgentModelUsage`` events are the authority.
    """

    tag: ClassVar[str] = "society.llm-agent-stopped/v1"

    agent: str
    reason: str
    detail: str
    failed: bool
    turns: int
    replies: int
    passes: int
    failed_calls: int
    prompt_tokens: int
    completion_tokens: int
    context_dropped: int
    elapsed_s: float


llm_events = EventCatalog.merge(
    model_gateway_catalog, EventCatalog.make(LLMAgentConfigured, LLMAgentStopped)
)
"""What an llm runtime contributes to a run's catalog: the gateway's events and its own."""


class LLMOwner(BridgeOwner):
    """The llm agent's owner-local API: ``instruct``, ``state`` (with usage so far), ``stop``."""

    async def instruct(self, text: str, *, peers: Sequence[str] = ()) -> None:
        """Hand the agent an owner instruction; it takes a turn on it.

        With ``peers``, in a conversation with them (opened if need be); otherwise in its most
        recent conversation, or in its first one once a message arrives.
        """
        await self._call("instruct", text=text, peers=list(peers))

    async def stop(self, *, reason: str = "owner") -> None:
        """Ask the agent to stop; it reports ``reason`` and its termination is ``Completed``."""
        await self._call("stop", reason=reason)


@dataclass(frozen=True, eq=False, kw_only=True)
class LLMRuntime(RuntimeDescriptor):
    """An agent whose turns a chat model writes, through the run's model gateway."""

    runtime: ClassVar[str] = "llm"

    config: LLMConfig = field(default_factory=LLMConfig)
    provider: ProviderConfig | None = None
    """``None``: the run's local SmolLM2 model. A provider's key is named, never given."""
    image: str = LLM_IMAGE
    command: tuple[str, ...] = LLM_COMMAND
    resources: Resources = LLM_RESOURCES
    events: EventCatalog = field(default_factory=lambda: llm_events)
    services: tuple[RunService, ...] = (MODEL_SERVICE,)

    @property
    def model_provider(self) -> ProviderConfig | None:
        return self.provider

    @property
    def model_token_budget(self) -> int | None:
        return self.config.budget.max_tokens

    def attach(self, access: SandboxAccess) -> AbstractAsyncContextManager[Attachment[LLMOwner]]:
        async def configured(state: dict[str, Any]) -> None:
            await _record(access, _configured(access.agent, state, self.config))

        async def stopped(report: Mapping[str, Any]) -> None:
            await _record(access, _stopped(access.agent, report))

        return attach_bridge(
            access,
            LLMOwner,
            runtime="llm",
            timeout_s=self.ready_timeout_s,
            on_ready=configured,
            on_report=stopped,
        )

    async def stop(self, owner: Any) -> None:
        try:
            await owner.stop(reason="run-teardown")
        except OwnerError:
            pass


@checked_options
def llm(
    identity: str,
    *,
    instructions: str = "",
    budget: Budget | None = None,
    context: ContextPolicy | None = None,
    reply: ReplyPolicy | None = None,
    provider: str | ProviderConfig = "local",
    model: str | None = None,
    image: str = LLM_IMAGE,
    resources: Resources | None = None,
    environment: Mapping[str, str] | None = None,
    files: Mapping[str, bytes | str] | None = None,
    credentials: Mapping[str, SecretRef] | None = None,
    harvest: Harvest | None = None,
    ready_timeout_s: float = 60.0,
) -> LLMRuntime:
    """An llm agent who is ``identity`` (its ``IDENTITY.md``) and does ``instructions``.

    ``provider`` is ``"local"`` (the run's own SmolLM2 model, the default), a name from
    ``controller.modelgateway.config.NAMED_PROVIDERS`` such as ``"openai"`` (with ``model``), or
    a ``ProviderConfig``. Its identity, instructions, configuration and transcript are harvested.
    """
    if not identity.strip():
        raise RuntimeDescriptorError("an llm agent needs an identity", reason="no-identity")
    config = LLMConfig(
        budget=budget or Budget(), context=context or ContextPolicy(), reply=reply or ReplyPolicy()
    )
    chosen = granted_provider(provider, model)
    given = {path: c.encode() if isinstance(c, str) else c for path, c in (files or {}).items()}
    written = {IDENTITY_FILE: identity.encode(), CONFIG_FILE: _config_json(config)}
    if instructions.strip():
        written[INSTRUCTIONS_FILE] = instructions.encode()
    clashes = sorted(set(given) & {IDENTITY_FILE, INSTRUCTIONS_FILE, CONFIG_FILE})
    if clashes:
        raise RuntimeDescriptorError(
            f"{', '.join(clashes)} are written from llm()'s arguments", reason="bad-path"
        )
    return LLMRuntime(
        config=config,
        provider=chosen,
        image=image,
        resources=resources or LLM_RESOURCES,
        environment=dict(environment or {}),
        files={**written, **given},
        credentials=dict(credentials or {}),
        harvest=harvest or Harvest(files=(*written, TRANSCRIPT_FILE)),
        ready_timeout_s=ready_timeout_s,
    )


def granted_provider(provider: str | ProviderConfig, model: str | None) -> ProviderConfig | None:
    """The provider an agent's descriptor names, checked: ``None`` for the run's local model."""
    if isinstance(provider, ProviderConfig):
        return provider
    if provider == "local":
        if model is not None:
            raise RuntimeDescriptorError(
                "the local provider serves one model (SmolLM2-135M-Instruct); drop model=",
                reason="unknown-model",
            )
        return None
    try:
        return named_provider(provider, model)
    except ValueError as exc:
        raise RuntimeDescriptorError(str(exc), reason="unknown-provider") from None


def _config_json(config: LLMConfig) -> bytes:
    body = config.model_dump(mode="json", by_alias=True)
    return json.dumps(body, indent=2, sort_keys=True).encode()


def _configured(agent: str, state: Mapping[str, Any], config: LLMConfig) -> LLMAgentConfigured:
    return LLMAgentConfigured(
        agent=agent,
        model=str(state.get("model") or "unknown"),
        budget=config.budget,
        context=config.context,
        context_policy=config.context.describe(),
        reply=config.reply,
    )


def _stopped(agent: str, report: Mapping[str, Any]) -> LLMAgentStopped:
    state = report.get("state") if isinstance(report.get("state"), dict) else {}
    assert isinstance(state, dict)
    usage = state.get("usage") if isinstance(state.get("usage"), dict) else {}
    context = state.get("context") if isinstance(state.get("context"), dict) else {}
    assert isinstance(usage, dict) and isinstance(context, dict)

    def count(source: Mapping[str, Any], key: str) -> int:
        value = source.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    elapsed = state.get("elapsedS")
    return LLMAgentStopped(
        agent=agent,
        reason=str(report.get("reason") or "unknown"),
        detail=str(state.get("stopDetail") or report.get("detail") or ""),
        failed=report.get("outcome") == "failed",
        turns=count(state, "turns"),
        replies=count(state, "replies"),
        passes=count(state, "passes"),
        failed_calls=count(state, "failedCalls"),
        prompt_tokens=count(usage, "promptTokens"),
        completion_tokens=count(usage, "completionTokens"),
        context_dropped=count(context, "dropped"),
        elapsed_s=float(elapsed) if isinstance(elapsed, int | float) else 0.0,
    )


async def _record(access: SandboxAccess, event: Event) -> None:
    if access.record is not None:
        await access.record(event)
