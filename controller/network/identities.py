"""Participant identities and credentials: who may connect to the run's router, and who is live."""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from controller.network.fabric import Signal
from society_sandbox.network.errors import NetworkError
from society_sandbox.network.protocol import NAME_PATTERN, Participant, ParticipantRef

ParticipantKind = Literal["agent", "endpoint"]
_NAME = re.compile(NAME_PATTERN)


class Consumer(Protocol):
    """A participant's live attachment: a WebSocket connection or an in-process endpoint."""

    def close_for(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class RouterCredential:
    """A participant's identity and its secret token (never logged, never in the ledger)."""

    participant: Participant
    token: str = field(repr=False)


@dataclass(eq=False, slots=True)
class Registration:
    participant: Participant
    kind: ParticipantKind
    secret: bytes | None  # None once revoked
    connection: Consumer | None = None
    sessions: int = 0
    """How many connections have authenticated as this participant so far."""


class ParticipantRegistry:
    """The run's participants by name and id, their credentials and their live connections."""

    def __init__(self) -> None:
        self._by_name: dict[str, Registration] = {}
        self._by_id: dict[str, Registration] = {}
        self._auth_changed = Signal()

    def __iter__(self) -> Iterator[Registration]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def register(self, name: str, *, kind: ParticipantKind = "agent") -> RouterCredential:
        """Issue an identity and a fresh 256-bit credential for ``name``.

        A name is unique in a run; registering a revoked name again issues a new credential for
        the same participant.
        """
        if not isinstance(name, str) or not _NAME.match(name):
            raise NetworkError(
                f"{name!r} is not a participant name (letters, digits, '_', '.', '-'; 1-64)",
                reason="invalid-name",
            )
        token = secrets.token_urlsafe(32)
        existing = self._by_name.get(name)
        if existing is not None:
            if existing.secret is not None or existing.kind != kind:
                raise NetworkError(
                    f"{name!r} is already registered as {existing.participant.id}",
                    reason="participant-exists",
                )
            existing.secret = token.encode()
            return RouterCredential(existing.participant, token)
        participant = Participant(id=f"{kind}:{name}", name=name)
        registration = Registration(participant, kind, token.encode())
        self._by_name[name] = registration
        self._by_id[participant.id] = registration
        return RouterCredential(participant, token)

    def revoke(self, participant_id: str) -> None:
        """Refuse the participant's credential from now on and close its live connection."""
        registration = self._by_id.get(participant_id)
        if registration is None:
            raise NetworkError(
                f"no participant {participant_id!r} in this run", reason="unknown-participant"
            )
        registration.secret = None
        if registration.connection is not None:
            registration.connection.close_for("revoked")

    def authenticate(self, token: str) -> Registration | None:
        """The registration holding ``token`` (constant-time comparison with every credential)."""
        presented = token.encode()
        found: Registration | None = None
        for registration in self._by_id.values():
            secret = registration.secret
            if secret is not None and hmac.compare_digest(secret, presented):
                found = registration
        return found

    def participant(self, who: ParticipantRef) -> Participant:
        """Resolve a name, identity or endpoint against this run's participants."""
        if not isinstance(who, str | Participant):
            who = who.participant
        name = who.name if isinstance(who, Participant) else who
        registration = self._by_name.get(name) if isinstance(name, str) else None
        if registration is None or (
            isinstance(who, Participant) and registration.participant != who
        ):
            raise NetworkError(
                f"{who!r} is not a participant of this run (known: "
                f"{', '.join(sorted(self._by_name)) or 'none'})",
                reason="unknown-participant",
            )
        return registration.participant

    def registration(self, name: str) -> Registration:
        return self._by_id[self.participant(name).id]

    def is_authenticated(self, name: str) -> bool:
        """Whether ``name`` is connected and authenticated right now."""
        return self.registration(name).connection is not None

    def sessions(self, name: str) -> int:
        """How many connections have authenticated as ``name`` so far."""
        return self.registration(name).sessions

    async def wait_authenticated(self, name: str, *, after: int = 0) -> None:
        """Until ``name`` is connected by a session later than its first ``after`` (a restarted
        agent's new session, not the old one still closing)."""
        registration = self.registration(name)
        while registration.connection is None or registration.sessions <= after:
            await self._auth_changed.wait()

    def attach(self, registration: Registration, consumer: Consumer) -> None:
        """``consumer`` is now the participant's live connection (superseding an older one)."""
        previous = registration.connection
        registration.connection = consumer
        registration.sessions += 1
        if previous is not None and previous is not consumer:
            previous.close_for("superseded")
        self._auth_changed.notify()

    def detach(self, registration: Registration, consumer: Consumer) -> None:
        """``consumer`` is gone; the participant is offline unless a newer connection took over."""
        if registration.connection is consumer:
            registration.connection = None
            self._auth_changed.notify()
