"""What the program sees of each roster agent: identity, owner handle, termination."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from controller.agents.termination import Observation, Termination
from controller.errors import SocietyError

if TYPE_CHECKING:
    from society_sandbox.network.protocol import Participant

G = TypeVar("G")


class OwnerTypeError(SocietyError, TypeError):
    """A roster agent's owner handle is not the class the program asked for; ``reason`` says so."""

    reason = "owner-type"


@dataclass(frozen=True, slots=True)
class AgentHandle(Generic[G]):
    """One started roster agent.

    ``agent`` is its router identity (``Participant``: ``.id``, ``.name``); ``owner`` its owner
    handle, of the runtime's own class: ``ScriptedOwner`` (``scripted``), ``LLMOwner`` (``llm``),
    ``OpenClawRPC`` (``openclaw``: OpenClaw's own RPC), ``NanoClawOwner`` (``nanoclaw``:
    NanoClaw's contract), ``PeerObservations`` (``peer``: read-only). ``termination`` is an
    awaitable observation resolving to ``Completed | Failed | Exited | Signaled``.
    """

    name: str
    runtime: str
    agent: Participant
    owner: G
    termination: Observation[Termination]


class Roster(Mapping[str, AgentHandle[Any]]):
    """The exact roster: ``ctx.agents["alice"]`` or ``ctx.agents.alice``; no other keys.

    Names are data, so ``ctx.agents.alice.owner`` is typed ``Any``;
    ``ctx.agents.owner("alice", LLMOwner)`` is the same object, typed and checked.
    """

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

    def owner(self, name: str, owner_class: type[G]) -> G:
        """Agent ``name``'s owner handle, typed as ``owner_class``; ``OwnerTypeError`` if it is
        another runtime's (an agent named like a Mapping method is reached this way too)."""
        handle = self[name]
        if not isinstance(handle.owner, owner_class):
            raise OwnerTypeError(
                f"{name} runs {handle.runtime}; its owner handle is "
                f"{type(handle.owner).__name__}, not {owner_class.__name__}"
            )
        return handle.owner

    def handle(self, name: str, owner_class: type[G]) -> AgentHandle[G]:
        """Agent ``name``'s whole handle, its owner handle typed as ``owner_class`` (checked)."""
        self.owner(name, owner_class)
        handle: AgentHandle[G] = self[name]
        return handle
