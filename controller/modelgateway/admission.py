"""What the gateway's peers may hold of it: open connections and buffered request bodies.

A body is buffered whole before it is parsed (4 MiB at most), so what bounds one request does
not bound many: each connection counts from its TCP accept, is attributed to an agent by the
first head whose token it carries, and every body's bytes are reserved at its head, before any
is read (the declared ``Content-Length``; a chunked body the most a body may be), against the
agent's allowance and the gateway's. A request over a bound is answered at once and its
connection closed, with nothing more read. Before its head a connection holds at most one socket
read (256 KiB) and an incomplete head (h11's 16 KiB), so ``max_connections`` bounds that too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from controller.modelgateway._http import HttpResponse
from controller.modelgateway.answers import error_response

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GatewayLimits:
    """Bounds on what all peers, and each agent, may hold of the gateway at once."""

    max_connections: int = 256
    """Open connections, authenticated or not; one past it is answered 503 and closed."""
    max_connections_per_agent: int = 32
    """Connections that carried an agent's token; past it the agent's request gets 429."""
    max_body_bytes_per_agent: int = 8 * MIB
    """Request body bytes buffered for one agent at once (two full-size bodies)."""
    max_body_bytes: int = 64 * MIB
    """Request body bytes buffered for every agent together."""


DEFAULT_GATEWAY_LIMITS = GatewayLimits()


class GatewayBounds:
    """The gateway's running counts against its ``GatewayLimits``."""

    def __init__(self, limits: GatewayLimits = DEFAULT_GATEWAY_LIMITS) -> None:
        self.limits = limits
        self.connections = 0
        self.buffered = 0
        self._agent_connections: Counter[str] = Counter()
        self._agent_buffered: Counter[str] = Counter()

    def open(self) -> PeerConnection | HttpResponse:
        """Count a connection just accepted, or the answer that refuses it."""
        if self.connections >= self.limits.max_connections:
            return error_response(
                503,
                f"the gateway holds {self.connections} connections, its limit; retry shortly",
                "gateway_busy",
            )
        self.connections += 1
        return PeerConnection(self)

    def agent_buffered(self, agent: str) -> int:
        return self._agent_buffered[agent]


class PeerConnection:
    """One accepted connection: the agent it carries and the body bytes it holds."""

    def __init__(self, bounds: GatewayBounds) -> None:
        self._bounds = bounds
        self.agent: str | None = None
        self.held = 0
        self._closed = False

    def attribute(self, agent: str) -> HttpResponse | None:
        """This connection carries ``agent``'s requests; the refusal when it holds too many."""
        if self.agent == agent:
            return None
        bounds, limit = self._bounds, self._bounds.limits.max_connections_per_agent
        if self.agent is not None:  # a second token on one connection: count it as the new one's
            bounds._agent_connections[self.agent] -= 1
            self.agent = None
        if bounds._agent_connections[agent] >= limit:
            return error_response(
                429,
                f"agent {agent!r} holds {limit} connections to the gateway, its limit; "
                f"reuse one (keep-alive) or close one",
                "too_many_connections",
            )
        bounds._agent_connections[agent] += 1
        self.agent = agent
        return None

    def take(self, nbytes: int) -> HttpResponse | None:
        """Reserve ``nbytes`` of the current body, or the refusal when that is over a bound."""
        bounds, limits = self._bounds, self._bounds.limits
        assert self.agent is not None, "a body is read only for an attributed connection"
        if bounds._agent_buffered[self.agent] + nbytes > limits.max_body_bytes_per_agent:
            return error_response(
                429,
                f"agent {self.agent!r} has {limits.max_body_bytes_per_agent} bytes of request "
                f"bodies in flight at most; wait for its other calls to end",
                "body_bytes_in_flight",
            )
        if bounds.buffered + nbytes > limits.max_body_bytes:
            return error_response(
                503,
                "the gateway holds its limit of request bodies in flight; retry shortly",
                "gateway_busy",
            )
        bounds._agent_buffered[self.agent] += nbytes
        bounds.buffered += nbytes
        self.held += nbytes
        return None

    def release(self) -> None:
        """The current body is no longer held (answered, refused or abandoned)."""
        if self.held and self.agent is not None:
            self._bounds._agent_buffered[self.agent] -= self.held
            self._bounds.buffered -= self.held
        self.held = 0

    def close(self) -> None:
        """The connection ended (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.release()
        if self.agent is not None:
            self._bounds._agent_connections[self.agent] -= 1
        self._bounds.connections -= 1
