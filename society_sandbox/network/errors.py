"""Typed network errors: stable codes shared by error frames, close codes and ``NetworkError``."""

from __future__ import annotations

from typing import Literal, get_args

from society_sandbox.errors import SocietyError

ErrorCode = Literal[
    "unsupported-version",
    "authentication-failed",
    "not-authenticated",
    "already-authenticated",
    "malformed-frame",
    "not-dispatched",
    "rate-limited",
    "unknown-participant",
    "same-participant",
    "participant-exists",
    "invalid-name",
    "unknown-conversation",
    "not-a-participant",
    "client-message-id-conflict",
    "unknown-delivery",
    "heartbeat-timeout",
    "superseded",
    "revoked",
    "router-stopping",
    "router-start-failed",
    "ledger-unavailable",
    "unencodable-message",
    "connection-lost",
    "endpoint-closed",
]
"""Every stable error code. An error frame carries one; ``NetworkError.reason`` is one."""

ERROR_CODES: frozenset[str] = frozenset(get_args(ErrorCode))

RETRYABLE: frozenset[str] = frozenset({"not-dispatched", "connection-lost"})
"""Codes after which the same request may succeed later unchanged."""

# WebSocket close codes the router uses (4000-4999 is the application range).
CLOSE_CODES: dict[str, int] = {
    "authentication-failed": 4001,
    "unsupported-version": 4002,
    "not-authenticated": 4003,
    "malformed-frame": 4004,
    "heartbeat-timeout": 4008,
    "superseded": 4009,
    "revoked": 4010,
    "router-stopping": 1001,
}
CLOSE_REASONS: dict[int, str] = {code: reason for reason, code in CLOSE_CODES.items()}

NEXT_STEP: dict[str, str] = {
    "unsupported-version": "upgrade the client to a protocol version the router offers",
    "authentication-failed": "use the credential the router issued for this run (it is per run)",
    "not-authenticated": "send an authenticate frame first",
    "already-authenticated": "authenticate once per connection",
    "malformed-frame": "send one JSON object matching the protocol schema per text frame",
    "not-dispatched": "wait: the run has not dispatched its program yet (the client retries)",
    "rate-limited": "send less: this agent is over its RunSpec's message_limits; retry later",
    "unknown-participant": "name a participant registered in this run",
    "same-participant": "a link joins two different participants",
    "participant-exists": "choose another name; names are unique in a run",
    "invalid-name": "use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
    "unknown-conversation": "open the conversation first, or use an id a delivery carried",
    "not-a-participant": "only a conversation's participants may send to it",
    "client-message-id-conflict": "use a fresh client message id for a different message",
    "unknown-delivery": "acknowledge only message ids delivered to this participant",
    "heartbeat-timeout": "send a frame at least every heartbeat interval",
    "superseded": "another connection authenticated as this participant",
    "revoked": "the credential was revoked; ask the run for a new one",
    "router-stopping": "the run is ending",
    "router-start-failed": "free the port or choose another host/port",
    "ledger-unavailable": "the ledger failed; the run cannot record messages any more",
    "unencodable-message": "send Unicode text without lone surrogates; later messages still flow",
    "connection-lost": "the client reconnects and retries by itself",
    "endpoint-closed": "use the endpoint only inside its async with block",
}


class NetworkError(SocietyError):
    """A network operation failed; ``reason`` is a stable code from ``ErrorCode``, and its next
    step (``NEXT_STEP``) is part of the one-line message, which travels in agents' logs."""

    reason = "connection-lost"

    def __init__(self, detail: str, *, reason: str) -> None:
        next_step = NEXT_STEP.get(reason)
        message = f"{detail} ({reason}: {next_step})" if next_step else detail
        super().__init__(message, reason=reason)
        self.detail = detail

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE
