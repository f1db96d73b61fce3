"""The scripted agent program: router session + policy engine + owner API, one message at a time.

Exit codes: 0 after a clean stop (the owner's ``stop``, a ``stop`` rule, or SIGTERM); 1 when the
router went away or the agent failed; 2 when the sandbox was not set up as the boot contract says.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import SocketListener
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agent_images.router_session import leaf, live_session, stop_on_signal
from agent_images.scripted.engine import Incoming, Outgoing, PolicyEngine
from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.owner_api import OwnerApiServer, OwnerHandlers
from society_sandbox.runtimes.scripted import OWNER, POLICY_FILE, ScriptedPolicy

"""How long (seconds, default 10) the agent stays up without its router before it exits 1."""


@dataclass(frozen=True, slots=True)
class Exit:
    code: int
    outcome: str
    detail: str | None = None


class ScriptedAgent:
    """One agent's life: connect, open its conversations, answer by policy, stop on request."""

    def __init__(self, config: BootConfig, secrets: Secrets, policy: ScriptedPolicy) -> None:
        self.config = config
        self.secrets = secrets
        self.engine = PolicyEngine(policy, name=config.agent_name, seed=config.seed)
        self.participant_id: str | None = None
        self.conversations: dict[tuple[str, ...], str] = {}
        self.instructions = 0
        self._stop = anyio.Event()
        send, receive = anyio.create_memory_object_stream[Incoming](1024)
        self._inbox_send: MemoryObjectSendStream[Incoming] = send
        self._inbox: MemoryObjectReceiveStream[Incoming] = receive

    # ---- owner API handlers -----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "name": self.config.agent_name,
            "participantId": self.participant_id,
            "authenticated": self.participant_id is not None,
            "conversations": sorted(set(self.conversations.values())),
            "instructions": self.instructions,
            "stopping": self._stop.is_set(),
            **self.engine.state(),
        }

    async def instruct(self, text: str) -> None:
        self.instructions += 1
        await self._inbox_send.send(Incoming(sender=OWNER, text=text))

    def stop(self) -> None:
        self._stop.set()

    # ---- life ------------------------------------------------------------------------------

    async def live(self) -> Exit:
        """Run until stopped (exit 0) or until the router session ends (exit 1)."""
        try:
            await live_session(
                self.config,
                self.secrets,
                self._stop,
                (self._receive, self._act),
                on_connect=self._connected,
            )
        except Exception as exc:  # the session is gone for good: the router disappeared
            if self._stop.is_set():
                return Exit(0, "completed")
            cause = leaf(exc)
            return Exit(1, "failed", f"router session ended: {type(cause).__name__}: {cause}")
        return Exit(0, "completed")

    async def _receive(self, session: Any) -> None:
        async for delivery in session.deliveries():
            await self._inbox_send.send(
                Incoming(
                    sender=_name(delivery.sender),
                    text=_text(delivery.parts),
                    conversation_id=delivery.conversation_id,
                )
            )
        self.stop()  # the router stopped: the run is over

    def _connected(self, session: Any) -> None:
        self.participant_id = session.identity.id

    async def _act(self, session: Any) -> None:
        for outgoing in self.engine.openings():
            await self._send(session, outgoing)
        async for message in self._inbox:
            decision = self.engine.decide(message)
            for outgoing in decision.sends:
                await self._send(session, outgoing)
            if decision.stop:
                self.stop()

    async def _send(self, session: Any, outgoing: Outgoing) -> None:
        if outgoing.delay_s:
            await anyio.sleep(outgoing.delay_s)
        conversation = outgoing.conversation_id
        if conversation is None:
            key = tuple(sorted(outgoing.peers))
            conversation = self.conversations.get(key)
            if conversation is None:
                ref = await session.open(*outgoing.peers)
                conversation = self.conversations[key] = ref.conversation_id
        await session.send(conversation, outgoing.text)


def _name(sender: Any) -> str:
    return str(getattr(sender, "name", sender))


def _text(parts: Any) -> str:
    texts = []
    for part in parts:
        texts.append(part if isinstance(part, str) else str(getattr(part, "text", "")))
    return "\n".join(texts)


async def run(config: BootConfig) -> int:
    secrets = Secrets.read(config.secrets_file)
    policy = ScriptedPolicy.model_validate_json(_read_policy())
    agent = ScriptedAgent(config, secrets, policy)
    listener = await SocketListener.from_socket(config.bridge_socket())

    async def instruct(text: str, peers: tuple[str, ...]) -> None:
        await agent.instruct(text)  # a scripted agent's rules, not the owner, choose its peers

    owner_api = OwnerApiServer(
        listener,
        secrets.bridge_token,
        OwnerHandlers(state=agent.state, instruct=instruct, stop=lambda reason: agent.stop()),
    )
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(owner_api.serve)
        tasks.start_soon(stop_on_signal, agent.stop)
        result = await agent.live()
        await owner_api.announce({"outcome": result.outcome, "detail": result.detail})
        tasks.cancel_scope.cancel()
    if result.detail:
        print(json.dumps({"outcome": result.outcome, "detail": result.detail}), file=sys.stderr)
    return result.code


def _read_policy() -> bytes:
    with open(POLICY_FILE, "rb") as handle:
        return handle.read()


def main() -> None:
    try:
        config = BootConfig.from_environment()
    except BootError as exc:
        print(f"scripted agent: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(anyio.run(run, config))
