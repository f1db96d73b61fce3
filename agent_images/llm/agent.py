"""The llm agent program: router session + model turns + owner API.

It reads who it is from ``IDENTITY.md``, what to do from ``INSTRUCTIONS.md`` and its budgets and
policies from ``llm.json``; it reaches a model only through the run's gateway, with the per-run
token in its secrets file. Messages that arrive while a turn runs are answered together in the
next turn. It stops at a budget (turns, tokens, wall time), when its owner stops it, when the
gateway ends its model use, or when the router goes away, and says why in its ``terminating``
report.

Exit codes: 0 after a clean stop; 1 when the router went away or the model stayed unavailable;
2 when the sandbox was not set up as the boot contract says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import SocketListener
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agent_images.llm.context import (
    OWNER,
    ConversationContext,
    Turn,
    clean_reply,
    system_prompt,
)
from agent_images.llm.model import ModelCallError, ModelClient
from agent_images.router_session import leaf, live_session
from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.owner_api import OwnerApiServer, OwnerHandlers
from society_sandbox.runtimes.llm import (
    CONFIG_FILE,
    GATEWAY_SOCKET_VARIABLE,
    GATEWAY_TOKEN_CREDENTIAL,
    GATEWAY_URL_VARIABLE,
    IDENTITY_FILE,
    INSTRUCTIONS_FILE,
    MODEL_VARIABLE,
    TRANSCRIPT_FILE,
    LLMConfig,
)

"""How long the agent stays up without its router before it gives up and exits."""
MAX_CONSECUTIVE_FAILURES = 3
"""Failed model calls in a row (after the gateway's own retries) before the agent gives up."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """A delivered message, or an owner instruction (``sender == OWNER``)."""

    sender: str
    text: str
    conversation_id: str | None = None
    peers: tuple[str, ...] = ()
    """The conversation's other participants; for an instruction, whom to talk to (optional)."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Why the agent stopped; ``failed`` makes its exit a failure."""

    reason: str
    detail: str
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Persona:
    name: str
    identity: str
    instructions: str


class LLMAgent:
    """One agent's life: connect, take turns on what arrives, stop at a budget or on request."""

    def __init__(
        self,
        config: BootConfig,
        secrets: Secrets,
        settings: LLMConfig,
        persona: Persona,
        model: ModelClient,
        transcript: IO[str] | None = None,
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.settings = settings
        self.persona = persona
        self.model = model
        self.transcript = transcript
        self.started = time.monotonic()
        self.participant_id: str | None = None
        self.contexts: dict[str, ConversationContext] = {}
        self.by_peers: dict[tuple[str, ...], str] = {}
        self.latest: str | None = None
        self.unplaced_notes: list[str] = []
        self.received = self.instructions = 0
        self.turns = self.replies = self.passes = self.failed_calls = 0
        self.prompt_tokens = self.completion_tokens = 0
        self._consecutive_failures = 0
        self.stopped: Stop | None = None
        self._stop = anyio.Event()
        self._active = anyio.Event()
        """Set by the first message or instruction: the wall-time budget counts from there."""
        send, receive = anyio.create_memory_object_stream[Incoming](1024)
        self._inbox_send: MemoryObjectSendStream[Incoming] = send
        self._inbox: MemoryObjectReceiveStream[Incoming] = receive
        self._mention = re.compile(rf"(?<![\w-])@?{re.escape(persona.name)}(?![\w-])", re.I)

    # ---- owner API ---------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        context = self.settings.context
        return {
            "name": self.persona.name,
            "participantId": self.participant_id,
            "authenticated": self.participant_id is not None,
            "model": self.model.model,
            "conversations": sorted(self.contexts),
            "received": self.received,
            "instructions": self.instructions,
            "turns": self.turns,
            "replies": self.replies,
            "passes": self.passes,
            "failedCalls": self.failed_calls,
            "usage": {
                "promptTokens": self.prompt_tokens,
                "completionTokens": self.completion_tokens,
                "tokens": self.tokens_used,
            },
            "budget": self.settings.budget.model_dump(mode="json", by_alias=True),
            "context": {
                **context.model_dump(mode="json", by_alias=True),
                "description": context.describe(),
                "dropped": sum(c.dropped for c in self.contexts.values()),
                "clipped": sum(c.clipped for c in self.contexts.values()),
            },
            "reply": self.settings.reply.model_dump(mode="json", by_alias=True),
            "elapsedS": round(time.monotonic() - self.started, 3),
            "stopping": self._stop.is_set(),
            "stopReason": self.stopped.reason if self.stopped else None,
            "stopDetail": self.stopped.detail if self.stopped else None,
        }

    async def instruct(self, text: str, peers: tuple[str, ...]) -> None:
        self.instructions += 1
        await self._inbox_send.send(Incoming(sender=OWNER, text=text, peers=peers))

    def stop(self, reason: str, detail: str = "", *, failed: bool = False) -> None:
        """Stop for ``reason``; the first reason given is the one reported."""
        if self.stopped is None:
            self.stopped = Stop(reason, detail or reason, failed)
        self._stop.set()

    @property
    def tokens_used(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    # ---- life --------------------------------------------------------------------------------

    async def live(self) -> Stop:
        try:
            await live_session(
                self.config,
                self.secrets,
                self._stop,
                (self._receive, self._act, self._wall_clock),
                on_connect=self._connected,
            )
        except Exception as exc:
            cause = leaf(exc)
            reason = "router-lost" if isinstance(cause, ConnectionError) else "error"
            self.stop(reason, f"{type(cause).__name__}: {cause}", failed=True)
        assert self.stopped is not None
        return self.stopped

    async def _receive(self, session: Any) -> None:
        async for delivery in session.deliveries():
            self.received += 1
            await self._inbox_send.send(
                Incoming(
                    sender=delivery.sender.name,
                    text=delivery.text,
                    conversation_id=delivery.conversation_id,
                    peers=tuple(
                        p.name for p in delivery.participants if p.id != self.participant_id
                    ),
                )
            )
        self.stop("router-closed", "the router stopped delivering: the run is over")

    def _connected(self, session: Any) -> None:
        self.participant_id = session.identity.id

    async def _wall_clock(self, _session: Any) -> None:
        limit = self.settings.budget.max_wall_s
        await self._active.wait()
        await anyio.sleep(limit)
        self.stop("wall-time-budget", f"active for {limit:g} s, its wall-time budget")

    async def _act(self, session: Any) -> None:
        pause = self.settings.reply.pause_s
        async for first in self._inbox:
            if pause:
                await anyio.sleep(pause)
            self._active.set()
            batch = [first, *self._drain()]
            due: dict[str, ConversationContext] = {}
            for item in batch:
                context = await self._place(session, item)
                if context is not None and self._warrants_turn(item):
                    due[context.conversation_id] = context
            for context in due.values():
                await self._turn(session, context)
                if self._stop.is_set():
                    return

    def _drain(self) -> list[Incoming]:
        items = []
        while True:
            try:
                items.append(self._inbox.receive_nowait())
            except anyio.WouldBlock:
                return items

    async def _place(self, session: Any, item: Incoming) -> ConversationContext | None:
        """Add ``item`` to its conversation's context (opening one for an instruction that
        names peers); an instruction with no conversation yet waits for the first one."""
        if item.sender == OWNER:
            if item.peers:
                context = await self._conversation_with(session, item.peers)
            elif self.latest is not None:
                context = self.contexts[self.latest]
            else:
                self.unplaced_notes.append(item.text)
                return None
        else:
            assert item.conversation_id is not None
            context = self._context(item.conversation_id, item.peers)
        context.add(Turn(item.sender, item.text))
        self.latest = context.conversation_id
        return context

    async def _conversation_with(self, session: Any, peers: tuple[str, ...]) -> ConversationContext:
        key = tuple(sorted(set(peers) - {self.persona.name}))
        conversation_id = self.by_peers.get(key)
        if conversation_id is None:
            ref = await session.open(*key)
            conversation_id = ref.conversation_id
        return self._context(conversation_id, key)

    def _context(self, conversation_id: str, peers: tuple[str, ...]) -> ConversationContext:
        context = self.contexts.get(conversation_id)
        if context is None:
            context = ConversationContext(conversation_id, peers, self.settings.context)
            self.contexts[conversation_id] = context
            self.by_peers.setdefault(tuple(sorted(peers)), conversation_id)
            for note in self.unplaced_notes:
                context.add(Turn(OWNER, note))
            self.unplaced_notes.clear()
        return context

    def _warrants_turn(self, item: Incoming) -> bool:
        if item.sender == OWNER or self.settings.reply.reply_to == "any":
            return True
        return bool(self._mention.search(item.text))

    async def _turn(self, session: Any, context: ConversationContext) -> None:
        """One model call for ``context``: reply in the conversation, or pass."""
        if self._budget_spent():
            return
        reply_policy = self.settings.reply
        persona = self.persona
        messages = context.chat(
            system_prompt(persona.name, persona.identity, persona.instructions, context.peers)
        )
        try:
            completion = await self.model.complete(
                messages,
                max_tokens=reply_policy.max_reply_tokens,
                temperature=reply_policy.temperature,
                seed=self._seed(),
            )
        except ModelCallError as error:
            self._model_failed(error)
            return
        self._consecutive_failures = 0
        self.turns += 1
        self.prompt_tokens += completion.prompt_tokens or 0
        self.completion_tokens += completion.completion_tokens or 0
        reply = clean_reply(
            completion.text,
            reply_policy.max_reply_chars,
            cut_off=completion.finish_reason == "length",
        )
        if reply is None:
            self.passes += 1
        else:
            await session.send(context.conversation_id, reply)
            context.add(Turn(persona.name, reply, own=True))
            self.replies += 1
        self._transcribe(
            {
                "turn": self.turns,
                "conversationId": context.conversation_id,
                "messages": len(messages),
                "kept": len(context.turns),
                "dropped": context.dropped,
                "promptTokens": completion.prompt_tokens,
                "completionTokens": completion.completion_tokens,
                "finishReason": completion.finish_reason,
                "decision": "pass" if reply is None else "reply",
                "reply": reply,
            }
        )
        self._budget_spent()

    def _budget_spent(self) -> bool:
        """Stop when a turn or token budget is spent; whether the agent is stopping."""
        budget = self.settings.budget
        if self.tokens_used >= budget.max_tokens:
            self.stop(
                "token-budget",
                f"used {self.tokens_used} tokens (budget {budget.max_tokens}) in "
                f"{self.turns} turns",
            )
        elif self.turns >= budget.max_turns:
            self.stop("turn-budget", f"took {self.turns} turns (budget {budget.max_turns})")
        return self._stop.is_set()

    def _model_failed(self, error: ModelCallError) -> None:
        self.failed_calls += 1
        self._transcribe({"turn": None, "error": str(error), "status": error.status})
        if error.ended:
            self.stop("model-use-ended", str(error))
            return
        self._consecutive_failures += 1
        if self._consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            self.stop(
                "model-unavailable",
                f"{self._consecutive_failures} model calls failed in a row; last: {error}",
                failed=True,
            )

    def _seed(self) -> int:
        name = zlib.crc32(self.persona.name.encode())
        return (self.config.seed * 1_000_003 + name + self.turns) % 2**31

    def _transcribe(self, entry: dict[str, Any]) -> None:
        if self.transcript is not None:
            self.transcript.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self.transcript.flush()


def read_persona(name: str, workdir: Path) -> tuple[LLMConfig, Persona]:
    """The agent's configuration and persona from its working directory."""
    try:
        settings = LLMConfig.model_validate_json((workdir / CONFIG_FILE).read_bytes())
        identity = (workdir / IDENTITY_FILE).read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise BootError(f"cannot read {CONFIG_FILE} and {IDENTITY_FILE}: {exc}") from None
    instructions_path = workdir / INSTRUCTIONS_FILE
    instructions = (
        instructions_path.read_text(encoding="utf-8") if instructions_path.is_file() else ""
    )
    return settings, Persona(name, identity, instructions)


async def run(
    config: BootConfig, settings: LLMConfig, persona: Persona, transcript: IO[str]
) -> int:
    secrets = Secrets.read(config.secrets_file)
    base_url, model_name = os.environ.get(GATEWAY_URL_VARIABLE), os.environ.get(MODEL_VARIABLE)
    token = secrets.credentials.get(GATEWAY_TOKEN_CREDENTIAL)
    if not base_url or not model_name or not token:
        raise BootError(
            f"the sandbox lacks {GATEWAY_URL_VARIABLE}, {MODEL_VARIABLE} or the "
            f"{GATEWAY_TOKEN_CREDENTIAL} credential; the run's model service grants them"
        )
    unix_socket = os.environ.get(GATEWAY_SOCKET_VARIABLE) or None
    async with ModelClient(base_url, token, model_name, unix_socket=unix_socket) as model:
        agent = LLMAgent(config, secrets, settings, persona, model, transcript)
        listener = await SocketListener.from_socket(config.bridge_socket())
        owner_api = OwnerApiServer(
            listener,
            secrets.bridge_token,
            OwnerHandlers(state=agent.state, instruct=agent.instruct, stop=agent.stop),
        )
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(owner_api.serve)
            tasks.start_soon(_stop_on_signal, agent)
            stopped = await agent.live()
            await owner_api.announce(
                {
                    "outcome": "failed" if stopped.failed else "completed",
                    "detail": f"{stopped.reason}: {stopped.detail}",
                    "reason": stopped.reason,
                    "state": agent.state(),
                }
            )
            tasks.cancel_scope.cancel()
    print(json.dumps({"stopped": stopped.reason, "detail": stopped.detail}), file=sys.stderr)
    return 1 if stopped.failed else 0


async def _stop_on_signal(agent: LLMAgent) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            agent.stop("signal", f"received {signal.Signals(signum).name}")


def main() -> None:
    try:
        config = BootConfig.from_environment()
        settings, persona = read_persona(config.agent_name, Path.cwd())
    except BootError as exc:
        print(f"llm agent: {exc}", file=sys.stderr)
        sys.exit(2)
    with open(TRANSCRIPT_FILE, "a", encoding="utf-8") as transcript:
        try:
            code = anyio.run(run, config, settings, persona, transcript)
        except BootError as exc:
            print(f"llm agent: {exc}", file=sys.stderr)
            code = 2
    sys.exit(code)
