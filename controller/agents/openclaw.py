"""The ``openclaw`` runtime, controller side: a real OpenClaw agent behind its own gateway RPC.

The agent program (``OPENCLAW_COMMAND``) runs OpenClaw's gateway unpatched inside the
agent's sandbox, plus an adapter that holds the router credential and turns delivered messages
into OpenClaw ``agent`` runs. The roster's owner handle for an OpenClaw agent is an ``OpenClawRPC``:
OpenClaw's own WebSocket RPC (``call(method, params)``, ``agent``, ``agent_wait``), reached
through the sandbox's bridge socket and authenticated by OpenClaw's token check with the run's
bridge token. The model is the run's model gateway (usage measured there); OpenClaw's session
transcripts (SQLite) and logs are harvested by digest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import anyio

from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    checked_options,
    file_bytes,
)
from controller.agents.termination import Observation, Termination
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import model_gateway_catalog
from controller.modelgateway.service import ModelService
from controller.services import RunService
from ledger.events import Event, EventCatalog
from society_sandbox.runtimes.openclaw import (
    AGENT_CONFIG_FILE,
    GATEWAY_LOG,
    KNOWN_TOOLS,
    NODE_VERSION,
    OPENCLAW_LOG,
    OPENCLAW_VERSION,
    TRANSCRIPT_DB,
    WORKSPACE_DIR,
    AgentOptions,
    ExecMode,
    SandboxMode,
)
from society_sandbox.runtimes.openclaw_rpc import OpenClawRPC, OpenClawRPCError, open_rpc

OPENCLAW_IMAGE = "society/openclaw:dev"
"""The locally built image; cluster profiles need it pinned by digest."""
OPENCLAW_COMMAND = ("python", "-m", "agent_images.openclaw")
OPENCLAW_TRANSCRIPT = TRANSCRIPT_DB
"""Where an OpenClaw agent's transcript (SQLite) is harvested, relative to its working directory."""
OPENCLAW_RESOURCES = Resources(cpu=0.5, memory_mib=768, memory_limit_mib=8192)
"""OpenClaw's gateway holds ~730 MB; Node reserves far more address space than it uses."""
OPENCLAW_MODEL_SERVICE = ModelService(local_n_ctx=4096)
"""OpenClaw's trimmed prompt is ~1,900 tokens: the local model needs a 4k context."""
WORKSPACE_FILES = frozenset(
    {"IDENTITY.md", "SOUL.md", "AGENTS.md", "USER.md", "TOOLS.md", "MEMORY.md", "HEARTBEAT.md"}
)
"""The workspace files OpenClaw reads (docs/concepts/agent-workspace.md); others are refused."""


class OpenClawAgentConfigured(Event):
    """An OpenClaw agent is up: its pinned versions and the options mapped onto its config."""

    tag: ClassVar[str] = "society.openclaw-agent-configured/v1"

    agent: str
    openclaw_version: str
    node_version: str
    server_version: str
    """What OpenClaw's gateway said in its ``hello-ok``."""
    tools_deny: list[str]
    tools_allow: list[str]
    elevated: bool
    exec_mode: str
    sandbox_mode: str
    workspace_files: list[str]


openclaw_events = EventCatalog.merge(
    model_gateway_catalog, EventCatalog.make(OpenClawAgentConfigured)
)


@dataclass(frozen=True, eq=False, kw_only=True)
class OpenClawRuntime(RuntimeDescriptor):
    """An agent whose turns OpenClaw takes, through the run's model gateway."""

    runtime: ClassVar[str] = "openclaw"

    options: AgentOptions = field(default_factory=AgentOptions)
    provider: ProviderConfig | None = None
    token_budget: int | None = None
    image: str = OPENCLAW_IMAGE
    command: tuple[str, ...] = OPENCLAW_COMMAND
    resources: Resources = OPENCLAW_RESOURCES
    events: EventCatalog = field(default_factory=lambda: openclaw_events)
    services: tuple[RunService, ...] = (OPENCLAW_MODEL_SERVICE,)
    ready_timeout_s: float = 300.0

    @property
    def model_provider(self) -> ProviderConfig | None:
        return self.provider

    @property
    def model_token_budget(self) -> int | None:
        return self.token_budget

    def attach(self, access: SandboxAccess) -> AbstractAsyncContextManager[Attachment[OpenClawRPC]]:
        return self._attach(access)

    @asynccontextmanager
    async def _attach(self, access: SandboxAccess) -> AsyncIterator[Attachment[OpenClawRPC]]:
        async with _connect(access, self.ready_timeout_s) as rpc, anyio.create_task_group() as tg:
            if access.record is not None:
                await access.record(self._configured(access.agent, rpc))
            termination: Observation[Termination] = Observation()

            async def observe() -> None:
                termination.set((await access.exit).plain())

            tg.start_soon(observe)
            try:
                yield Attachment(owner=rpc, termination=termination)
            finally:
                tg.cancel_scope.cancel()

    def _configured(self, agent: str, rpc: OpenClawRPC) -> OpenClawAgentConfigured:
        server = rpc.hello.get("server") or {}
        return OpenClawAgentConfigured(
            agent=agent,
            openclaw_version=OPENCLAW_VERSION,
            node_version=NODE_VERSION,
            server_version=str(server.get("version") or "unknown"),
            tools_deny=list(self.options.tools_deny),
            tools_allow=list(self.options.tools_allow),
            elevated=self.options.elevated,
            exec_mode=self.options.exec_mode,
            sandbox_mode=self.options.sandbox_mode,
            workspace_files=sorted(
                p.removeprefix(f"{WORKSPACE_DIR}/")
                for p in self.files
                if p.startswith(WORKSPACE_DIR)
            ),
        )


@asynccontextmanager
async def _connect(access: SandboxAccess, timeout_s: float) -> AsyncIterator[OpenClawRPC]:
    """OpenClaw's RPC through the bridge, retried until the agent is up, exits, or time is up.

    Each attempt is bounded by ``open_rpc``'s own timeout (no enclosing cancel scope: the
    connection outlives this loop)."""
    url = f"ws://{access.bridge_host or 'localhost'}:{access.bridge_port}/"
    deadline = anyio.current_time() + timeout_s
    last = "no answer yet"
    async with AsyncExitStack() as stack:
        while not access.exit.done and anyio.current_time() < deadline:
            opening = open_rpc(
                access.bridge_token, url=url, unix_path=access.bridge_path, timeout_s=10
            )
            try:
                rpc = await stack.enter_async_context(opening)
            except OpenClawRPCError as exc:
                if exc.reason == "unauthorized":
                    raise RuntimeDescriptorError(
                        f"OpenClaw's gateway of {access.agent} refused the bridge token",
                        reason="bridge-refused",
                    ) from None
                last = str(exc)
                await anyio.sleep(0.5)
                continue
            yield rpc
            return
    if access.exit.done:
        raise RuntimeDescriptorError(
            f"agent {access.agent} exited before OpenClaw's gateway answered "
            f"({access.exit.peek()}); its output.log says why",
            reason="exited-before-ready",
        )
    raise RuntimeDescriptorError(
        f"OpenClaw's gateway of {access.agent} did not answer within {timeout_s:g} s ({last})",
        reason="bridge-timeout",
    )


@checked_options
def openclaw(
    identity: str,
    *,
    workspace: Mapping[str, str | bytes | Path] | None = None,
    tools_deny: Sequence[str] = ("*",),
    tools_allow: Sequence[str] = (),
    elevated: bool = False,
    exec_mode: ExecMode = "deny",
    sandbox_mode: SandboxMode = "off",
    provider: ProviderConfig | None = None,
    max_turns: int = 4,
    max_reply_tokens: int = 64,
    token_budget: int | None = 40_000,
    turn_timeout_s: int = 240,
    resources: Resources | None = None,
    ready_timeout_s: float = 300.0,
) -> OpenClawRuntime:
    """An OpenClaw agent who is ``identity`` (its workspace ``IDENTITY.md``).

    ``workspace``: more OpenClaw workspace files (``SOUL.md``, ``AGENTS.md``, ...), as text, bytes
    or a ``Path`` read now. ``tools_deny``/``tools_allow``: OpenClaw tool names or groups
    (``tools.deny``/``tools.allow``; default: deny all). ``elevated`` maps to
    ``tools.elevated.enabled``, ``exec_mode`` to ``tools.exec.mode``, ``sandbox_mode`` to
    ``agents.defaults.sandbox.mode``. ``provider``: ``None`` for the run's local model.
    ``max_turns`` replies at most; ``token_budget``: the gateway's limit for this agent.
    """
    if not identity.strip():
        raise RuntimeDescriptorError("an OpenClaw agent needs an identity", reason="no-identity")
    for name in (*tools_deny, *tools_allow):
        if name not in KNOWN_TOOLS:
            raise RuntimeDescriptorError(
                f"{name!r} is not an OpenClaw {OPENCLAW_VERSION} tool or tool group; use one of "
                f"{', '.join(sorted(t for t in KNOWN_TOOLS if t.startswith('group:')))}, '*', "
                f"or a tool name from docs/gateway/config-tools/tool-policy.md",
                reason="unknown-tool",
            )
    files = {f"{WORKSPACE_DIR}/IDENTITY.md": identity.encode()}
    for name, content in (workspace or {}).items():
        if name not in WORKSPACE_FILES or name == "IDENTITY.md":
            raise RuntimeDescriptorError(
                f"{name!r} is not an OpenClaw workspace file this runtime writes; give one of "
                f"{', '.join(sorted(WORKSPACE_FILES - {'IDENTITY.md'}))} (IDENTITY.md comes from "
                f"identity=)",
                reason="bad-workspace-file",
            )
        files[f"{WORKSPACE_DIR}/{name}"] = file_bytes(
            f"workspace file {name}", content, "missing-workspace-file"
        )
    try:
        options = AgentOptions(
            tools_deny=tuple(tools_deny),
            tools_allow=tuple(tools_allow),
            elevated=elevated,
            exec_mode=exec_mode,
            sandbox_mode=sandbox_mode,
            max_tokens=max_reply_tokens,
            timeout_s=turn_timeout_s,
            max_turns=max_turns,
        )
    except ValueError as exc:
        raise RuntimeDescriptorError(f"bad OpenClaw option: {exc}", reason="bad-option") from None
    files[AGENT_CONFIG_FILE] = options.model_dump_json(by_alias=True, indent=2).encode()
    return OpenClawRuntime(
        options=options,
        provider=provider,
        token_budget=token_budget,
        files=files,
        resources=resources or OPENCLAW_RESOURCES,
        harvest=Harvest(
            files=(*sorted(files), TRANSCRIPT_DB, GATEWAY_LOG, OPENCLAW_LOG), max_bytes=16 << 20
        ),
        ready_timeout_s=ready_timeout_s,
    )


__all__ = [
    "OPENCLAW_MODEL_SERVICE",
    "OpenClawAgentConfigured",
    "OpenClawRPC",
    "OpenClawRuntime",
    "openclaw",
    "openclaw_events",
]
