"""Link policies and the link controller: shaping one directed pair for the life of a scope.

A ``LinkPolicy`` maps one ``LinkDelivery`` to a verdict: ``Deliver()``, ``Drop(reason)``,
``Delay(seconds)`` or ``Hold()``. Policies on a pair stack in installation order: the first
drop wins outright; otherwise any hold parks the delivery; otherwise delays sum; otherwise it is
delivered. Shaping happens at the router's delivery stage, so it applies to every receiver.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import anyio

from controller.events.network import (
    LinkDown,
    LinkPolicyCleared,
    LinkPolicySet,
    LinkUp,
)
from ledger.writer import LedgerWriter
from society_sandbox.network.errors import NetworkError
from society_sandbox.network.protocol import Delivery, Participant, ParticipantRef

logger = logging.getLogger(__name__)

LINK_DOWN_REASON = "link-down"
POLICY_ERROR_REASON = "policy-error"


@dataclass(frozen=True, slots=True)
class Deliver:
    """Let the delivery through (as far as this policy is concerned)."""


@dataclass(frozen=True, slots=True)
class Drop:
    """Discard the delivery; ``reason`` is recorded in ``LinkMessageDropped``."""

    reason: str

    def __post_init__(self) -> None:
        # Refused here, in the policy that made it, rather than in the router's ledger append.
        if not isinstance(self.reason, str):
            raise TypeError(f"a drop reason is a str, not {type(self.reason).__name__}")
        try:
            self.reason.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a drop reason is Unicode text without lone surrogates") from None


@dataclass(frozen=True, slots=True)
class Delay:
    """Defer the delivery by ``seconds`` (a float or a ``timedelta``) on the anyio clock."""

    seconds: float

    def __init__(self, seconds: float | timedelta) -> None:
        value = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        if not value >= 0:
            raise ValueError(f"a delay is a duration >= 0 seconds, not {seconds!r}")
        object.__setattr__(self, "seconds", value)


@dataclass(frozen=True, slots=True)
class Hold:
    """Park the delivery until a policy on the pair clears, then evaluate the chain again."""


Verdict = Deliver | Drop | Delay | Hold


@dataclass(frozen=True, slots=True)
class LinkDelivery:
    """What a policy decides about: one committed message on its way from sender to receiver."""

    sender: Participant
    receiver: Participant
    message: Delivery


LinkPolicy = Callable[[LinkDelivery], Verdict]
"""A plain (synchronous) function from one delivery to a verdict; it runs in the router, as each
delivery reaches its receiver's link stage, so it must not block."""


def drop_all(reason: str) -> LinkPolicy:
    """Drop every delivery with ``reason``."""
    verdict = Drop(reason)
    return lambda _delivery: verdict


def delay_all(duration: float | timedelta) -> LinkPolicy:
    """Defer every delivery by ``duration``."""
    verdict = Delay(duration)
    return lambda _delivery: verdict


def hold_all() -> LinkPolicy:
    """Park every delivery until the policy clears."""
    verdict = Hold()
    return lambda _delivery: verdict


@dataclass(eq=False, slots=True)
class _Installed:
    policy_id: str
    policy: LinkPolicy


@dataclass(eq=False, slots=True)
class LinkPair:
    """The policies on one directed pair, in installation order."""

    sender: Participant
    receiver: Participant
    policies: list[_Installed] = field(default_factory=list)
    down_scopes: int = 0
    transitions: anyio.Lock = field(default_factory=anyio.Lock)
    cleared: anyio.Event = field(default_factory=anyio.Event)
    """Set (and replaced) whenever a policy leaves the pair: held deliveries re-evaluate."""

    def remove(self, installed: _Installed) -> None:
        self.policies.remove(installed)
        self.cleared.set()
        self.cleared = anyio.Event()

    @property
    def blocking(self) -> bool:
        """A policy of the chain waits for an answer from elsewhere (the module's process):
        its verdicts are awaited off the event loop (``LinkPolicy.blocking``)."""
        return any(getattr(installed.policy, "blocking", False) for installed in self.policies)

    def evaluate(
        self, delivery: LinkDelivery, policies: Sequence[_Installed] | None = None
    ) -> Verdict:
        """The verdict of the whole chain, as it stands now (or of ``policies``, a snapshot of it
        taken on the loop for a worker thread)."""
        held = False
        total = 0.0
        for installed in self.policies if policies is None else policies:
            try:
                verdict = installed.policy(delivery)
            except Exception:
                logger.exception(
                    "link policy %s on %s -> %s raised; the delivery is dropped",
                    installed.policy_id,
                    self.sender.name,
                    self.receiver.name,
                )
                return Drop(POLICY_ERROR_REASON)
            if isinstance(verdict, Drop):
                return verdict
            if isinstance(verdict, Hold):
                held = True
            elif isinstance(verdict, Delay):
                total += verdict.seconds
            elif not isinstance(verdict, Deliver):
                logger.error(
                    "link policy %s returned %r, not a verdict", installed.policy_id, verdict
                )
                return Drop(POLICY_ERROR_REASON)
        if held:
            return Hold()
        if total > 0:
            return Delay(total)
        return Deliver()


class LinkController:
    """``ctx.network.links``: each verb is an ``async with`` scope on one directed pair.

    Participants are named by roster/endpoint name or by ``Participant``. Naming one that is not
    in the run, or the same one twice, raises ``NetworkError`` at the call.
    """

    def __init__(
        self, ledger: LedgerWriter, resolve: Callable[[ParticipantRef], Participant]
    ) -> None:
        self._ledger = ledger
        self._resolve = resolve
        self._pairs: dict[tuple[str, str], LinkPair] = {}
        self._ids = itertools.count(1)

    def pair(self, sender_id: str, receiver_id: str) -> LinkPair | None:
        """The pair's policy state, when anything was ever installed on it."""
        return self._pairs.get((sender_id, receiver_id))

    def disable(
        self, sender: ParticipantRef, receiver: ParticipantRef
    ) -> AbstractAsyncContextManager[None]:
        """Drop every delivery from ``sender`` to ``receiver`` (reason ``link-down``).

        Overlapping scopes on a pair share one ``LinkDown`` and one final ``LinkUp``.
        """
        return self._down(self._pair_for(sender, receiver))

    def delay(
        self, sender: ParticipantRef, receiver: ParticipantRef, duration: float | timedelta
    ) -> AbstractAsyncContextManager[None]:
        """Defer each delivery by ``duration`` seconds."""
        verdict = Delay(duration)
        return self.shape(sender, receiver, lambda _d: verdict, f"delay {verdict.seconds:g}s")

    def hold(
        self, sender: ParticipantRef, receiver: ParticipantRef
    ) -> AbstractAsyncContextManager[None]:
        """Park each delivery until the scope ends (then it re-evaluates the active chain)."""
        return self.shape(sender, receiver, hold_all(), "hold")

    def shape(
        self,
        sender: ParticipantRef,
        receiver: ParticipantRef,
        policy: LinkPolicy,
        description: str,
    ) -> AbstractAsyncContextManager[None]:
        """Install ``policy`` on the pair for the life of the scope."""
        if not callable(policy) or inspect.iscoroutinefunction(policy):
            raise TypeError(
                f"a link policy is a plain function of one LinkDelivery returning a verdict, "
                f"not {policy!r}"
            )
        return self._installed(self._pair_for(sender, receiver), policy, description)

    # ---- internals -------------------------------------------------------------------------

    def _pair_for(self, sender: ParticipantRef, receiver: ParticipantRef) -> LinkPair:
        source, target = self._resolve(sender), self._resolve(receiver)
        if source.id == target.id:
            raise NetworkError(
                f"a link joins two participants; both ends are {source.name!r}",
                reason="same-participant",
            )
        key = (source.id, target.id)
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._pairs[key] = LinkPair(source, target)
        return pair

    @asynccontextmanager
    async def _down(self, pair: LinkPair) -> AsyncIterator[None]:
        ids = {"sender_id": pair.sender.id, "receiver_id": pair.receiver.id}
        with anyio.CancelScope(shield=True):
            async with pair.transitions:
                if pair.down_scopes == 0:
                    await self._ledger.append(LinkDown(**ids), producer="links")
                    pair.policies.append(_Installed(LINK_DOWN_REASON, drop_all(LINK_DOWN_REASON)))
                pair.down_scopes += 1
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                async with pair.transitions:
                    pair.down_scopes -= 1
                    if pair.down_scopes == 0:
                        try:
                            await self._ledger.append(LinkUp(**ids), producer="links")
                        finally:
                            pair.remove(
                                next(p for p in pair.policies if p.policy_id == LINK_DOWN_REASON)
                            )

    @asynccontextmanager
    async def _installed(
        self, pair: LinkPair, policy: LinkPolicy, description: str
    ) -> AsyncIterator[None]:
        installed = _Installed(f"policy-{next(self._ids)}", policy)
        ids = {
            "sender_id": pair.sender.id,
            "receiver_id": pair.receiver.id,
            "policy_id": installed.policy_id,
        }
        with anyio.CancelScope(shield=True):
            await self._ledger.append(
                LinkPolicySet(**ids, description=description), producer="links"
            )
            pair.policies.append(installed)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._ledger.append(LinkPolicyCleared(**ids), producer="links")
                finally:
                    pair.remove(installed)
