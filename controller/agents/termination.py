"""How an agent's runtime ended, and a one-shot awaitable observation of it."""

from __future__ import annotations

import signal as signals
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Completed:
    """The runtime reported its own completion and its process exited cleanly."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The runtime reported a failure before its process ended."""

    detail: str
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class Exited:
    """The process exited with ``code`` and the runtime reported nothing."""

    code: int


@dataclass(frozen=True, slots=True)
class Signaled:
    """The process was ended by ``signal``."""

    signal: int

    @property
    def signal_name(self) -> str:
        try:
            return signals.Signals(self.signal).name
        except ValueError:
            return f"SIG{self.signal}"


Termination = Completed | Failed | Exited | Signaled


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """What the platform saw end: an exit code, or a signal."""

    code: int | None = None
    signal: int | None = None

    @classmethod
    def from_returncode(cls, returncode: int) -> ProcessExit:
        return cls(signal=-returncode) if returncode < 0 else cls(code=returncode)

    def plain(self) -> Exited | Signaled:
        """The termination when the runtime reported nothing."""
        return Signaled(self.signal) if self.signal is not None else Exited(self.code or 0)


class Observation(Generic[T]):
    """A value that arrives once: ``await observation`` waits for it, ``peek()`` does not."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._value: T | None = None

    def set(self, value: T) -> None:
        """Record the value; later calls are ignored (the first observation stands)."""
        if not self._event.is_set():
            self._value = value
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def peek(self) -> T | None:
        return self._value

    async def wait(self) -> T:
        await self._event.wait()
        assert self._value is not None
        return self._value

    def __await__(self) -> Generator[Any, None, T]:
        return self.wait().__await__()
