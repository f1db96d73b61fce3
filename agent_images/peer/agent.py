"""The peer program: a router session, the policy called on everything received, a read-only bridge.

The bridge serves ``state`` (the peer's observations) and ``watch`` only: the owner API's
``instruct`` and ``stop`` are not offered, so nothing the controller sends makes the peer speak
or stop. It stops on SIGTERM (the platform's teardown) or when the router stops.

Exit codes: 0 after a clean stop; 1 when the router went away; 2 when the sandbox was not set up
as the boot contract says or the policy cannot be loaded.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import SocketListener

from agent_images.boot import BootConfig, BootError, Secrets
from agent_images.owner_api import OwnerGateway, OwnerHandlers
from agent_images.peer.policy import (
    PEER_CONFIG_FILE,
    Message,
    PeerSettings,
    PolicyError,
    Received,
    Say,
    as_decision,
)
from controller.network.client import connect_agent

POLICY_MODULE_NAME = "society_peer_policy"
ROUTER_LOST_AFTER_S = 10.0


class PeerAgent:
    """One peer's life: connect, call the policy on each delivery, send what it decides."""

    def __init__(self, config: BootConfig, secrets: Secrets, settings: PeerSettings) -> None:
        self.config = config
        self.secrets = secrets
        self.settings = settings
        self.policy: Callable[[Received], Any] = load_policy(settings)
        self.participant_id: str | None = None
        self.received: list[Message] = []
        self.conversations: dict[tuple[str, ...], str] = {}
        self.sent = 0
        self.policy_calls = 0
        self.policy_errors = 0
        self.last_policy_error: str | None = None
        self.published: dict[str, Any] = {}
        self.stopping = anyio.Event()

    def observations(self) -> dict[str, Any]:
        """What the bridge shows: the runtime's counters and what the policy published."""
        return {
            "name": self.config.agent_name,
            "participantId": self.participant_id,
            "received": len(self.received),
            "sent": self.sent,
            "maxSends": self.settings.max_sends,
            "policyCalls": self.policy_calls,
            "policyErrors": self.policy_errors,
            "lastPolicyError": self.last_policy_error,
            "conversations": sorted(set(self.conversations.values())),
            "published": copy.deepcopy(self.published),
            "stopping": self.stopping.is_set(),
        }

    async def live(self) -> tuple[int, str, str | None]:
        """Run until SIGTERM or the router's end; (exit code, outcome, detail)."""
        config = self.config
        try:
            async with connect_agent(
                config.router_url,
                self.secrets.router_token,
                ca_file=config.router_ca_file,
                unix_path=config.router_socket,
            ) as session:
                self.participant_id = session.identity.id
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._act, session)
                    tasks.start_soon(self._watch_router, session)
                    await self.stopping.wait()
                    tasks.cancel_scope.cancel()
        except Exception as exc:
            if self.stopping.is_set():
                return 0, "completed", None
            return 1, "failed", f"router session ended: {type(exc).__name__}: {exc}"
        return 0, "completed", None

    async def _act(self, session: Any) -> None:
        await self._decide(session)  # the opening call: nothing received yet
        async for delivery in session.deliveries():
            self.received.append(
                Message(
                    sender=str(getattr(delivery.sender, "name", delivery.sender)),
                    text="\n".join(_part_text(part) for part in delivery.parts),
                    conversation_id=delivery.conversation_id,
                )
            )
            await self._decide(session)
        self.stopping.set()  # the router stopped: the run is over

    async def _decide(self, session: Any) -> None:
        received = Received(me=self.config.agent_name, messages=tuple(self.received))
        self.policy_calls += 1
        try:
            decision = as_decision(await self._call_policy(received))
        except Exception as exc:  # the policy's bug is evidence, not the peer's end
            self._policy_failed(exc)
            return
        if decision.publish is not None:
            self.published = json.loads(json.dumps(dict(decision.publish)))
        for say in decision.say:
            if self.sent >= self.settings.max_sends:
                return
            await self._send(session, say, received)

    def _policy_failed(self, exc: Exception) -> None:
        self.policy_errors += 1
        self.last_policy_error = "".join(traceback.format_exception_only(exc)).strip()
        print(f"peer policy failed: {self.last_policy_error}", file=sys.stderr, flush=True)

    async def _call_policy(self, received: Received) -> Any:
        if inspect.iscoroutinefunction(self.policy):
            return await self.policy(received)
        # a thread, so a slow policy never stalls the bridge's observations
        return await anyio.to_thread.run_sync(self.policy, received, abandon_on_cancel=True)

    async def _send(self, session: Any, say: Say, received: Received) -> None:
        conversation = say.conversation_id
        if conversation is None and say.to:
            key = tuple(sorted(say.to))
            conversation = self.conversations.get(key)
            if conversation is None:
                ref = await session.open(*say.to)
                conversation = self.conversations[key] = ref.conversation_id
        if conversation is None:
            if received.latest is None:
                self._policy_failed(PolicyError(f"{say!r} names no peers and answers no message"))
                return
            conversation = received.latest.conversation_id
        await session.send(conversation, say.text)
        self.sent += 1

    async def _watch_router(self, session: Any) -> None:
        lost_at: float | None = None
        while True:
            await anyio.sleep(0.1)
            if session.connected:
                lost_at = None
            elif lost_at is None:
                lost_at = anyio.current_time()
            elif anyio.current_time() - lost_at > ROUTER_LOST_AFTER_S:
                raise ConnectionError(f"no router for {ROUTER_LOST_AFTER_S:g} s")


def load_policy(settings: PeerSettings) -> Callable[[Received], Any]:
    """Import the policy module from the working directory and return its function."""
    path = Path(settings.module).resolve()
    sys.path.insert(0, str(Path.cwd()))  # the policy may import its sibling files
    spec = importlib.util.spec_from_file_location(POLICY_MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise PolicyError(f"{settings.module} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[POLICY_MODULE_NAME] = module
    spec.loader.exec_module(module)
    function = getattr(module, settings.function, None)
    if not callable(function):
        raise PolicyError(f"{settings.module} defines no function {settings.function!r}")
    return function  # type: ignore[no-any-return]


def _part_text(part: Any) -> str:
    return part if isinstance(part, str) else str(getattr(part, "text", ""))


async def run(config: BootConfig, settings: PeerSettings) -> int:
    secrets = Secrets.read(config.secrets_file)
    try:
        agent = PeerAgent(config, secrets, settings)
    except Exception as exc:
        summary = "".join(traceback.format_exception_only(exc)).strip()
        print(f"peer: cannot load its policy: {summary}", file=sys.stderr)
        return 2
    listener = await SocketListener.from_socket(config.bridge_socket())
    bridge = OwnerGateway(listener, secrets.bridge_token, OwnerHandlers(state=agent.observations))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge.serve)
        tasks.start_soon(_stop_on_sigterm, agent)
        code, outcome, detail = await agent.live()
        await bridge.announce({"outcome": outcome, "detail": detail, "state": agent.observations()})
        tasks.cancel_scope.cancel()
    if detail:
        print(json.dumps({"outcome": outcome, "detail": detail}), file=sys.stderr)
    return code


async def _stop_on_sigterm(agent: PeerAgent) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            agent.stopping.set()


def main() -> None:
    try:
        config = BootConfig.from_environment()
    except BootError as exc:
        print(f"peer: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        settings = PeerSettings.model_validate_json(Path(PEER_CONFIG_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        print(f"peer: cannot read {PEER_CONFIG_FILE}: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(anyio.run(run, config, settings))
