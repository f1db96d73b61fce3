"""What the program sees of each roster agent: identity, native gateway, termination."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from controller.agents.termination import Observation, Termination

G = TypeVar("G")


@dataclass(frozen=True, slots=True)
class AgentHandle(Generic[G]):
    """One started roster agent.

    ``agent`` is its router identity (``Participant``: ``.id``, ``.name``); ``gateway`` the
    runtime's own owner API (``ScriptedGateway`` for ``scripted``); ``termination`` an awaitable
    observation resolving to ``Completed | Failed | Exited | Signaled``.
    """

    name: str
    runtime: str
    agent: Any
    gateway: G
    termination: Observation[Termination]


class Roster(Mapping[str, AgentHandle[Any]]):
    """The exact roster: ``ctx.agents["alice"]`` or ``ctx.agents.alice``; no other keys."""

    __slots__ = ("_handles",)

    def __init__(self, handles: Mapping[str, AgentHandle[Any]]) -> None:
        self._handles = dict(handles)

    def __getitem__(self, name: str) -> AgentHandle[Any]:
        try:
            return self._handles[name]
        except KeyError:
            raise KeyError(
                f"{name!r} is not in the roster (roster: {', '.join(self._handles)})"
            ) from None

    def __getattr__(self, name: str) -> AgentHandle[Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(str(exc)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)
