"""The peer program: a router session, the policy called on everything received, a read-only bridge.

The bridge serves ``state`` (the peer's observations) and ``watch`` only: the owner API's
``instruct`` and ``stop`` are not offered, so nothing the controller sends makes the peer speak
or stop. It stops on SIGTERM (the platform's teardown) or when the router stops. SIGTERM is
handled from the program's first line: one that comes while the policy still loads (a heavy
import) stops the load there, and at exit the peer does not wait for a policy call it abandoned,
so a stopped peer exits at once and cleanly.

A peer that cannot start (a declared package is missing, the policy does not import, its address
space is too small for what the policy loads) serves its bridge only to refuse ``state`` with why
(``OwnerRefusal``), so the readiness gate's error carries the reason and the next step.

Exit codes: 0 after a clean stop (also while loading); 1 when the router went away; 2 when the
sandbox was not set up as the boot contract says or the peer cannot start.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import importlib.util
import inspect
import json
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.to_thread
from anyio.abc import SocketListener

from agent_images.router_session import leaf, live_session
from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.owner_api import OwnerApiServer, OwnerHandlers, OwnerRefusal
from society_sandbox.packages import Unmet, unmet
from society_sandbox.runtimes.peer import (
    MAX_SENDS_REACHED,
    PEER_CONFIG_FILE,
    Message,
    PeerSettings,
    PolicyError,
    Received,
    Say,
    as_decision,
)

POLICY_MODULE_NAME = "society_peer_policy"
REFUSAL_WAIT_S = 30.0
"""How long a peer that cannot start waits for the controller to ask it why."""
THREAD_JOIN_S = 1.0
"""At exit, how long the peer waits for threads (a policy call it abandoned) before it leaves."""
MIB = 1024 * 1024

Policy = Callable[[Received], Any]


class StopRequested(BaseException):
    """SIGTERM came while the policy was loading (a ``BaseException``, so that a policy's
    ``except Exception`` does not swallow it)."""


class EarlyStop:
    """SIGTERM (the platform's stop) before the event loop's receiver takes over: remembered, and
    while the policy loads, raised there (``StopRequested``) so a slow import does not hold the
    stop. SIGINT keeps Python's default: no platform sends it, but a library may raise it
    itself (OpenBLAS does when it cannot start its threads)."""

    def __init__(self) -> None:
        self.requested = False
        self._loading = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        if self._loading:
            raise StopRequested

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        self._loading = True
        try:
            if self.requested:
                raise StopRequested
            yield
        finally:
            self._loading = False


@dataclass(frozen=True, slots=True)
class CannotStart:
    """Why the peer cannot start (``reason``, machine-readable) and what to do (``detail``)."""

    reason: str
    detail: str


class PeerAgent:
    """One peer's life: connect, call the policy on each delivery, send what it decides."""

    def __init__(
        self, config: BootConfig, secrets: Secrets, settings: PeerSettings, policy: Policy
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.settings = settings
        self.policy = policy
        self.participant_id: str | None = None
        self.received: list[Message] = []
        self.conversations: dict[tuple[str, ...], str] = {}
        self.sent = 0
        self.policy_calls = 0
        self.policy_errors = 0
        self.last_policy_error: str | None = None
        self.limit: str | None = None
        self.unsent = 0
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
            "limit": self.limit,
            "unsent": self.unsent,
            "conversations": sorted(set(self.conversations.values())),
            "published": copy.deepcopy(self.published),
            "stopping": self.stopping.is_set(),
        }

    async def live(self) -> tuple[int, str, str | None]:
        """Run until SIGTERM or the router's end; (exit code, outcome, detail)."""
        try:
            await live_session(
                self.config, self.secrets, self.stopping, (self._act,), on_connect=self._connected
            )
        except Exception as exc:
            if self.stopping.is_set():
                return 0, "completed", None
            cause = leaf(exc)
            return 1, "failed", f"router session ended: {type(cause).__name__}: {cause}"
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
        for index, say in enumerate(decision.say):
            if self.sent >= self.settings.max_sends:
                self._limit_reached(len(decision.say) - index)
                return
            await self._send(session, say, received)

    def _limit_reached(self, unsent: int) -> None:
        """The policy asked to say more than ``max_sends`` allows: nothing more is sent, and the
        peer says so once (its log, its observations, its stop record)."""
        self.unsent += unsent
        if self.limit is None:
            self.limit = MAX_SENDS_REACHED
            print(
                f"peer reached max_sends={self.settings.max_sends}: it sends nothing more "
                "(peer(..., max_sends=N) raises the limit)",
                file=sys.stderr,
                flush=True,
            )

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

    def _connected(self, session: Any) -> None:
        self.participant_id = session.identity.id


def prepare(settings: PeerSettings, early: EarlyStop) -> Policy | CannotStart | None:
    """The policy function; or why the peer cannot start; ``None``: stopped while it loaded."""
    missing = unmet(settings.packages)
    if missing:
        return CannotStart("package-missing", _missing_packages(missing))
    try:
        with early.interruptible():
            return load_policy(settings)
    except StopRequested:
        return None
    except KeyboardInterrupt:  # nothing sends a sandbox SIGINT: a library raised it itself
        detail = (
            "peer: loading its policy was interrupted by SIGINT, which a library raises itself "
            "when it cannot start (OpenBLAS does when it cannot create its threads, as under a "
            "low address-space limit)"
        )
        return CannotStart("address-space-exhausted", detail + _address_space_advice())
    except Exception as exc:
        summary = "".join(traceback.format_exception_only(exc)).strip()
        detail = f"peer: cannot load its policy: {summary}"
        if _short_of_address_space(exc):
            return CannotStart("address-space-exhausted", detail + _address_space_advice())
        return CannotStart("policy-unloadable", detail)


def _missing_packages(missing: list[Unmet]) -> str:
    shown = ", ".join(str(item) for item in missing)
    wanted = " ".join(f"'{item.requirement}'" for item in missing)
    return (
        f"peer: its policy needs {shown}, which this peer's Python ({sys.executable}) lacks: "
        f"install it there (`{sys.executable} -m pip install {wanted}`; on a cluster profile, "
        f"into the peer's image, peer(..., image=...)), or drop it from peer(..., packages=...)"
    )


def _short_of_address_space(exc: BaseException) -> bool:
    """A failure to map or allocate memory: what exceeding RLIMIT_AS looks like from Python."""
    if isinstance(exc, MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM:
        return True
    text = str(exc).lower()
    return isinstance(exc, ImportError | OSError) and any(
        sign in text for sign in ("failed to map segment", "cannot allocate memory")
    )


def _address_space_advice() -> str:
    """The limit in force and how to raise it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return (
            "; the peer ran out of memory: raise its limit with "
            "peer(..., resources=Resources(memory_limit_mib=...))"
        )
    limit = soft // MIB
    larger = -(-max(2 * limit, limit + 1024) // 512) * 512  # rounded up to 512 MiB
    return (
        f"; the peer's address space is limited to {limit} MiB (RLIMIT_AS, which the local "
        f"profile sets from the peer's resources.memory_limit_mib), too little for what its "
        f"policy loads: raise it with peer(..., resources=Resources(memory_limit_mib={larger}))"
    )


def load_policy(settings: PeerSettings) -> Policy:
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


async def run(
    config: BootConfig, settings: PeerSettings, loaded: Policy | CannotStart, early: EarlyStop
) -> int:
    secrets = Secrets.read(config.secrets_file)
    listener = await SocketListener.from_socket(config.bridge_socket())
    if isinstance(loaded, CannotStart):
        print(loaded.detail, file=sys.stderr, flush=True)
        await _refuse_to_start(listener, secrets, loaded, early)
        return 2
    agent = PeerAgent(config, secrets, settings, loaded)
    bridge = OwnerApiServer(listener, secrets.bridge_token, OwnerHandlers(state=agent.observations))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge.serve)
        tasks.start_soon(_stop_on_sigterm, agent, early)
        code, outcome, detail = await agent.live()
        await bridge.announce({"outcome": outcome, "detail": detail, "state": agent.observations()})
        tasks.cancel_scope.cancel()
    if detail:
        print(json.dumps({"outcome": outcome, "detail": detail}), file=sys.stderr)
    return code


async def _refuse_to_start(
    listener: SocketListener, secrets: Secrets, failure: CannotStart, early: EarlyStop
) -> None:
    """Serve the bridge only to refuse ``state`` with why, until that was said once (or a stop
    signal, or ``REFUSAL_WAIT_S`` without anyone asking)."""

    def state() -> dict[str, Any]:
        raise OwnerRefusal(failure.detail, reason=failure.reason)

    bridge = OwnerApiServer(listener, secrets.bridge_token, OwnerHandlers(state=state))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge.serve)
        tasks.start_soon(_cancel_on_stop, tasks.cancel_scope, early)
        with anyio.move_on_after(REFUSAL_WAIT_S):
            await bridge.refused.wait()
        tasks.cancel_scope.cancel()


async def _cancel_on_stop(scope: anyio.CancelScope, early: EarlyStop) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        if early.requested:
            scope.cancel()
        async for _ in signals:
            scope.cancel()


async def _stop_on_sigterm(agent: PeerAgent, early: EarlyStop) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        if early.requested:  # it came before this receiver took over
            agent.stopping.set()
        async for _ in signals:
            agent.stopping.set()


def main() -> None:
    early = EarlyStop()
    early.install()  # first: a stop while the policy loads must not wait for the load
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
    loaded = prepare(settings, early)
    if loaded is None or early.requested:
        print("peer: stopped while its policy was loading", file=sys.stderr)
        _exit(0)
    _exit(anyio.run(run, config, settings, loaded, early))


def _exit(code: int) -> NoReturn:
    """Exit with ``code``; a thread still running (a policy call the stop abandoned, a thread the
    policy started) gets ``THREAD_JOIN_S``, then the process leaves without it."""
    sys.stdout.flush()
    sys.stderr.flush()
    deadline = time.monotonic() + THREAD_JOIN_S
    for thread in _other_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    if _other_threads():
        os._exit(code)  # interpreter shutdown would wait for them, past the platform's grace
    sys.exit(code)


def _other_threads() -> list[threading.Thread]:
    current = threading.current_thread()
    return [t for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()]
