"""The ``nanoclaw`` runtime, controller side: Claude Agent SDK agents behind NanoClaw's contract.

The agent program (``NANOCLAW_COMMAND``) runs one NanoClaw-style runner per conversation
inside the agent's sandbox (Node, the pinned SDK, its trimmed options, the traffic variables set)
and sends every result on the agent's own router connection. The model is the run's model
gateway, spoken to as Anthropic Messages (usage measured there); the CLI holds a dummy key only.
The roster's owner handle is a ``NanoClawOwner``: NanoClaw's own prompt / follow-up / close
contract with NanoClaw's output markers, over the bridge socket, the bridge token checked first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import anyio

from controller.agents.nanoclaw_owner import (
    NanoClawOutput,
    NanoClawOwner,
    NanoClawOwnerError,
    NanoClawSession,
)
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    checked_options,
)
from controller.agents.termination import Observation, Termination
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import model_gateway_catalog
from controller.modelgateway.service import ModelService
from controller.services import RunService
from ledger.events import Event, EventCatalog
from society_sandbox.runtimes.nanoclaw import (
    AGENT_CONFIG_FILE,
    NODE_VERSION,
    RUNNER_LOG,
    SDK_VERSION,
    SEND_MESSAGE_TOOL,
    AgentOptions,
)

NANOCLAW_IMAGE = "society/nanoclaw:dev"
"""The locally built image; cluster profiles need it pinned by digest."""
NANOCLAW_COMMAND = ("python", "-m", "agent_images.nanoclaw")
NANOCLAW_RESOURCES = Resources(cpu=0.5, memory_mib=512, memory_limit_mib=8192)
"""The CLI peaks at ~230 MiB, the Node host ~80 MB; Node and the CLI reserve far more address
space than they use."""
NANOCLAW_MODEL_SERVICE = ModelService(local_n_ctx=4096)
"""Equal to OpenClaw's, so a run with both runtimes opens one gateway and one local model."""
KNOWN_TOOLS = frozenset({SEND_MESSAGE_TOOL})
"""The tools a NanoClaw agent may be allowed: its in-process MCP tool; the SDK's built-in tools
(shell, files, web) are never given."""


class NanoClawAgentConfigured(Event):
    """A NanoClaw agent is up: its pinned versions and the options its runners get."""

    tag: ClassVar[str] = "society.nanoclaw-agent-configured/v1"

    agent: str
    sdk_version: str
    node_version: str
    allowed_tools: list[str]
    max_turns: int
    sdk_max_turns: int
    output_tokens: int


nanoclaw_events = EventCatalog.merge(
    model_gateway_catalog, EventCatalog.make(NanoClawAgentConfigured)
)


@dataclass(frozen=True, eq=False, kw_only=True)
class NanoClawRuntime(RuntimeDescriptor):
    """An agent whose turns the Claude Agent SDK takes, through the run's model gateway."""

    runtime: ClassVar[str] = "nanoclaw"

    options: AgentOptions
    provider: ProviderConfig | None = None
    token_budget: int | None = None
    image: str = NANOCLAW_IMAGE
    command: tuple[str, ...] = NANOCLAW_COMMAND
    resources: Resources = NANOCLAW_RESOURCES
    events: EventCatalog = field(default_factory=lambda: nanoclaw_events)
    services: tuple[RunService, ...] = (NANOCLAW_MODEL_SERVICE,)
    ready_timeout_s: float = 120.0

    @property
    def model_provider(self) -> ProviderConfig | None:
        return self.provider

    @property
    def model_token_budget(self) -> int | None:
        return self.token_budget

    def attach(
        self, access: SandboxAccess
    ) -> AbstractAsyncContextManager[Attachment[NanoClawOwner]]:
        return self._attach(access)

    @asynccontextmanager
    async def _attach(self, access: SandboxAccess) -> AsyncIterator[Attachment[NanoClawOwner]]:
        owner = NanoClawOwner(
            access.bridge_token,
            unix_path=access.bridge_path,
            host=access.bridge_host or "localhost",
            port=access.bridge_port,
        )
        await _wait_ready(owner, access, self.ready_timeout_s)
        if access.record is not None:
            await access.record(
                NanoClawAgentConfigured(
                    agent=access.agent,
                    sdk_version=SDK_VERSION,
                    node_version=NODE_VERSION,
                    allowed_tools=list(self.options.allowed_tools),
                    max_turns=self.options.max_turns,
                    sdk_max_turns=self.options.sdk_max_turns,
                    output_tokens=self.options.output_tokens,
                )
            )
        termination: Observation[Termination] = Observation()
        async with anyio.create_task_group() as tasks:

            async def observe() -> None:
                termination.set((await access.exit).plain())

            tasks.start_soon(observe)
            try:
                yield Attachment(owner=owner, termination=termination)
            finally:
                tasks.cancel_scope.cancel()


async def _wait_ready(owner: NanoClawOwner, access: SandboxAccess, timeout_s: float) -> None:
    """The bridge's token check, retried until it answers, the agent exits, or time is up."""
    deadline = anyio.current_time() + timeout_s
    last = "no answer yet"
    while not access.exit.done and anyio.current_time() < deadline:
        try:
            await owner.hello()
            return
        except NanoClawOwnerError as exc:
            if exc.reason == "unauthorized":
                raise RuntimeDescriptorError(
                    f"the NanoClaw bridge of {access.agent} refused the bridge token",
                    reason="bridge-refused",
                ) from None
            last = str(exc)
        await anyio.sleep(0.2)
    if access.exit.done:
        raise RuntimeDescriptorError(
            f"agent {access.agent} exited before its NanoClaw bridge answered "
            f"({access.exit.peek()}); its output.log says why",
            reason="exited-before-ready",
        )
    raise RuntimeDescriptorError(
        f"the NanoClaw bridge of {access.agent} did not answer within {timeout_s:g} s ({last})",
        reason="bridge-timeout",
    )


@checked_options
def nanoclaw(
    identity: str,
    *,
    allowed_tools: Sequence[str] = (SEND_MESSAGE_TOOL,),
    max_turns: int = 4,
    sdk_max_turns: int = 2,
    output_tokens: int = 256,
    token_budget: int | None = 20_000,
    provider: ProviderConfig | None = None,
    resources: Resources | None = None,
    ready_timeout_s: float = 120.0,
) -> NanoClawRuntime:
    """A NanoClaw agent whose system prompt is ``identity`` (who it is, what it wants).

    ``allowed_tools``: of ``send_message`` (the SDK's built-in tools are never given).
    ``max_turns``: messages it sends at most over the run; ``sdk_max_turns``: model calls one
    result may take; ``output_tokens``: completion tokens per call; ``token_budget``: the
    gateway's limit for this agent; ``provider``: ``None`` for the run's local model.
    """
    if not identity.strip():
        raise RuntimeDescriptorError("a NanoClaw agent needs an identity", reason="no-identity")
    unknown = sorted(set(allowed_tools) - KNOWN_TOOLS)
    if unknown:
        raise RuntimeDescriptorError(
            f"{', '.join(unknown)}: not a tool a NanoClaw agent may be given; allow "
            f"{', '.join(sorted(KNOWN_TOOLS))} or nothing",
            reason="unknown-tool",
        )
    if token_budget is not None and token_budget < 1:
        raise RuntimeDescriptorError(
            f"token_budget is {token_budget}; give a positive number or None", reason="bad-option"
        )
    try:
        options = AgentOptions(
            identity=identity,
            allowed_tools=tuple(allowed_tools),
            max_turns=max_turns,
            sdk_max_turns=sdk_max_turns,
            output_tokens=output_tokens,
        )
    except ValueError as exc:
        raise RuntimeDescriptorError(f"bad NanoClaw option: {exc}", reason="bad-option") from None
    files = {AGENT_CONFIG_FILE: options.model_dump_json(by_alias=True, indent=2).encode()}
    return NanoClawRuntime(
        options=options,
        provider=provider,
        token_budget=token_budget,
        files=files,
        resources=resources or NANOCLAW_RESOURCES,
        harvest=Harvest(files=(AGENT_CONFIG_FILE, RUNNER_LOG), max_bytes=4 << 20),
        ready_timeout_s=ready_timeout_s,
    )


__all__ = [
    "NANOCLAW_MODEL_SERVICE",
    "NanoClawAgentConfigured",
    "NanoClawOutput",
    "NanoClawOwner",
    "NanoClawRuntime",
    "NanoClawSession",
    "nanoclaw",
    "nanoclaw_events",
]
