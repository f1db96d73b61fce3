"""The readiness gate: all roster agents ready (alive, bridge attached, authenticated), or none.

The first agent that fails (never ready in time, died, could not start) fails the gate at once.
An agent whose sandbox the platform replaces before dispatch is withdrawn until its new
application is ready again.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import anyio


@dataclass(frozen=True, slots=True)
class GateFailure:
    agent: str
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class GateResult:
    passed: bool
    ready: tuple[str, ...]
    failures: tuple[GateFailure, ...]
    elapsed_ms: float


class ReadinessGate:
    """Collects each agent's readiness; ``wait()`` returns when every one is ready or one failed."""

    def __init__(self, agents: Iterable[str]) -> None:
        self._expected = list(agents)
        self._ready: dict[str, float] = {}
        self._failures: dict[str, GateFailure] = {}
        self._settled = anyio.Event()
        self._started = time.monotonic()
        self._closed = False
        if not self._expected:
            self._settled.set()

    @property
    def closed(self) -> bool:
        """Whether the gate has been decided; later reports change nothing."""
        return self._closed

    def ready(self, agent: str) -> float:
        """Mark ``agent`` ready; returns milliseconds since the gate opened."""
        elapsed = (time.monotonic() - self._started) * 1000
        if not self._closed and agent not in self._failures:
            self._ready[agent] = elapsed
            if len(self._ready) == len(self._expected):
                self._settled.set()
        return elapsed

    def withdraw(self, agent: str) -> None:
        """Take ``agent`` out of the gate until it is ``ready`` again (its sandbox is replaced)."""
        if not self._closed:
            self._ready.pop(agent, None)

    def fail(self, agent: str, reason: str, detail: str) -> bool:
        """Fail the gate because of ``agent``; returns whether this was news (first report)."""
        if self._closed or agent in self._failures:
            return False
        self._ready.pop(agent, None)
        self._failures[agent] = GateFailure(agent, reason, detail)
        self._settled.set()
        return True

    async def wait(self) -> GateResult:
        while True:
            await self._settled.wait()
            if self._closed or self._failures or len(self._ready) == len(self._expected):
                return self.close()
            self._settled = anyio.Event()  # an agent was withdrawn after the last one was ready

    def close(self) -> GateResult:
        """Decide the gate now."""
        self._closed = True
        self._settled.set()
        ready = tuple(name for name in self._expected if name in self._ready)
        failures = tuple(self._failures.values())
        passed = not failures and len(ready) == len(self._expected)
        elapsed = (time.monotonic() - self._started) * 1000
        return GateResult(passed, ready, failures, elapsed)
