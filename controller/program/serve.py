"""The controller's side of a running program: the handles it gave and the calls it answers.

Every call from the module process names a handle and a member that ``exports`` lists for the
handle's class; the arguments are decoded as data (``codec``) before anything runs. Each call
runs in a task of its own (``cancel`` ends it), each ``async with`` block the module entered is
held by a task until the module leaves it, and every block and iterator still open when the
program ends is closed here, so nothing the module opened outlives its program.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from controller.errors import SocietyError
from controller.network.links import Delay, Deliver, Drop, Hold, LinkDelivery, Verdict
from controller.program import exports
from controller.program.codec import CodecError, Decoder, encode
from controller.program.wire import Channel, Frame, Inbox, error_frame
from ledger.errors import CatalogError, LedgerError
from ledger.events import Event, EventCatalog

MAX_HANDLES = 100_000
"""Handles one program may hold at once; a module that asks for more is refused."""
MAX_CALLS = 1_024
"""Calls one program may have running at once."""


class ProgramCallRefused(SocietyError):
    """The module process asked for something the controller does not give it."""

    reason = "call-refused"


class ModuleBlockFailed(Exception):
    """What a block the module left by raising sees as its error (the module's own exception
    stays in the module process)."""


@dataclass(eq=False)
class _Held:
    """An ``async with`` block the module is inside: its task leaves it when told."""

    leave: anyio.Event = field(default_factory=anyio.Event)
    failed: bool = False


class ProgramServer:
    """Answers one program's calls on ``channel`` for the life of ``serving()``."""

    def __init__(self, channel: Channel, customer: EventCatalog) -> None:
        self._channel = channel
        self._customer = customer
        self._handles: dict[int, object] = {}
        self._ids_by_object: dict[int, int] = {}
        self._ids = itertools.count(1)
        self._iterators: dict[int, AsyncIterator[Any]] = {}
        self._blocks: dict[int, _Held] = {}
        self._calls: dict[int, anyio.CancelScope] = {}
        self._tasks: TaskGroup | None = None
        self._decoder = Decoder(
            resolve=self._resolve, event=self._event, policy=lambda n: RemotePolicy(channel, n)
        )

    def export(self, value: object) -> dict[str, Any] | None:
        """A ``$handle`` on ``value`` when its class is exported (the same handle each time)."""
        listed = exports.members(type(value))
        if listed is None:
            return None
        known = self._ids_by_object.get(id(value))
        if known is None:
            if len(self._handles) >= MAX_HANDLES:
                raise ProgramCallRefused(
                    f"the program holds {MAX_HANDLES} handles; it asks for more than any "
                    "experiment needs",
                    reason="too-many-handles",
                )
            known = next(self._ids)
            self._handles[known] = value
            self._ids_by_object[id(value)] = known
            static = {
                name: encode(getattr(value, name), self.export)
                for name, kind in listed.items()
                if kind == exports.STATIC
            }
            return {
                "$handle": {"id": known, "class": exports.class_name(type(value)), "static": static}
            }
        return {"$handle": {"id": known, "class": exports.class_name(type(value))}}

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Callable[[Frame], None]]:
        """Answer calls inside the block; yields the channel's ``on_request`` (any thread).
        Leaving the block closes every block and iterator the program left open."""
        inbox = Inbox()
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self._dispatch, inbox.frames)
            try:
                yield inbox.post
            finally:
                self._tasks = None
                inbox.close()
                with anyio.CancelScope(shield=True):
                    for held in list(self._blocks.values()):
                        held.failed = True
                        held.leave.set()
                    for scope in list(self._calls.values()):
                        scope.cancel()
                    for iterator in list(self._iterators.values()):
                        with contextlib.suppress(Exception):
                            await _aclose(iterator)
                    self._iterators.clear()

    # ---- internals -------------------------------------------------------------------------

    async def _dispatch(self, frames: MemoryObjectReceiveStream[Frame]) -> None:
        async with frames:
            async for frame in frames:
                self._start(frame)

    def _start(self, frame: Frame) -> None:
        op = frame.get("op")
        if op == "cancel":
            scope = self._calls.get(_int(frame.get("target")))
            if scope is not None:
                scope.cancel()
            return
        call_id = frame.get("id")
        if type(call_id) is not int:
            return  # a request without an id has no one to answer
        if self._tasks is None:
            self._channel.reply(call_id, error=error_frame(not_running()))
            return
        if len(self._calls) >= MAX_CALLS:
            refused = ProgramCallRefused(
                f"the program has {MAX_CALLS} calls running at once", reason="too-many-calls"
            )
            self._channel.reply(call_id, error=error_frame(refused))
            return
        scope = anyio.CancelScope()
        self._calls[call_id] = scope
        self._tasks.start_soon(self._answer, call_id, frame, scope)

    async def _answer(self, call_id: int, frame: Frame, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                try:
                    value = await self._perform(frame)
                    answer = encode(value, self.export)
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:
                    self._channel.reply(call_id, error=error_frame(_typed(exc)))
                    return
                self._channel.reply(call_id, value=answer)
            if scope.cancelled_caught:
                self._channel.reply(call_id, error=error_frame(_cancelled()))
        finally:
            self._calls.pop(call_id, None)

    async def _perform(self, frame: Frame) -> Any:
        op = frame.get("op")
        if op == "call":
            return await self._call(frame)
        if op == "next":
            iterator = self._iterators.get(_int(frame.get("target")))
            if iterator is None:
                raise ProgramCallRefused("no such iterator", reason="unknown-handle")
            try:
                return {"item": await iterator.__anext__()}
            except StopAsyncIteration:
                self._iterators.pop(_int(frame.get("target")), None)
                return {"done": True}
        if op == "close":
            iterator = self._iterators.pop(_int(frame.get("target")), None)
            if iterator is not None:
                await _aclose(iterator)
            return None
        if op == "leave":
            held = self._blocks.get(_int(frame.get("target")))
            if held is None:
                return None  # already closed: the program ended, or was cancelled, inside it
            held.failed = bool(frame.get("failed"))
            held.leave.set()
            return None
        raise ProgramCallRefused(f"{op!r} is not a call the controller answers")

    async def _call(self, frame: Frame) -> Any:
        target = self._handles.get(_int(frame.get("target")))
        name = frame.get("name")
        listed = exports.members(type(target)) if target is not None else None
        if listed is None:
            raise ProgramCallRefused("no such handle", reason="unknown-handle")
        kind = listed.get(name) if isinstance(name, str) else None
        if kind is None:
            raise ProgramCallRefused(
                f"{type(target).__name__} has no member {name!r} a program may use",
                reason="member-not-exported",
            )
        assert isinstance(name, str)
        args = self._decoder.decode(frame.get("args", []))
        kwargs = self._decoder.decode(frame.get("kwargs", {"$map": {}}))
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise CodecError("a call's arguments are a list and a mapping")
        if kind in (exports.STATIC, exports.PROPERTY):
            return getattr(target, name)
        if kind == exports.ENTER:
            return await target.__aenter__()  # type: ignore[attr-defined]
        if kind == exports.EXIT:
            return await target.__aexit__(None, None, None)  # type: ignore[attr-defined]
        member = getattr(target, name)
        if kind == exports.SYNC:
            return member(*args, **kwargs)
        if kind == exports.ASYNC:
            result = member(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result
        if kind == exports.ITERATOR:
            iterator = member(*args, **kwargs)
            iterator_id = next(self._ids)
            self._iterators[iterator_id] = iterator
            return {"iterator": iterator_id}
        if kind == exports.CONTEXT:
            return await self._enter(member(*args, **kwargs))
        raise ProgramCallRefused(f"{kind!r} is not a kind of member")

    async def _enter(self, block: Any) -> dict[str, Any]:
        assert self._tasks is not None
        block_id = next(self._ids)
        held = self._blocks[block_id] = _Held()
        entered: anyio.Event = anyio.Event()
        outcome: list[Any] = []
        self._tasks.start_soon(self._hold, block, held, entered, outcome, block_id)
        await entered.wait()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return {"block": block_id, "value": outcome[0]}

    async def _hold(
        self, block: Any, held: _Held, entered: anyio.Event, outcome: list[Any], block_id: int
    ) -> None:
        try:
            try:
                value = await block.__aenter__()
            except BaseException as exc:
                outcome.append(exc if isinstance(exc, Exception) else _cancelled())
                entered.set()
                if isinstance(exc, Exception):
                    return
                raise
            outcome.append(value)
            entered.set()
            try:
                await held.leave.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    if held.failed:
                        failure = ModuleBlockFailed("the program left the block by raising")
                        await block.__aexit__(type(failure), failure, None)
                    else:
                        await block.__aexit__(None, None, None)
        finally:
            self._blocks.pop(block_id, None)

    def _resolve(self, body: Mapping[str, Any]) -> object:
        target = self._handles.get(_int(body.get("id")))
        if target is None:
            raise CodecError("an argument names a handle this program was never given")
        return target

    def _event(self, wire: Mapping[str, Any]) -> Event:
        try:
            return self._customer.decode(wire)
        except CatalogError as exc:
            if exc.reason != "unknown-tag":
                raise
            raise CatalogError(
                f"the program's event {str(wire.get('tag'))[:200]!r} is not one of this "
                "RunSpec's event classes; list its class in RunSpec.define(events=[...])",
                reason="undeclared-event",
            ) from None


POLICY_TIMEOUT_S = 1.0
"""How long the router waits for the module process's verdict on one delivery."""


class RemotePolicy:
    """A link policy of the module's, evaluated in the module process for each delivery (the
    router waits for the verdict; one that does not come within ``POLICY_TIMEOUT_S``, or is no
    verdict, drops the delivery as ``policy-error``)."""

    blocking = True
    """Each verdict is a round trip: the router awaits it off its event loop."""

    def __init__(self, channel: Channel, policy: int) -> None:
        self._channel = channel
        self._policy = policy

    def __call__(self, delivery: LinkDelivery) -> Verdict:
        answer = self._channel.request_sync(
            {"op": "policy", "policy": self._policy, "delivery": encode(delivery)},
            timeout_s=POLICY_TIMEOUT_S,
        )
        if answer.get("op") != "result":
            raise ProgramCallRefused("the module's link policy raised", reason="policy-error")
        verdict = _VERDICTS.decode(answer.get("value"))
        if not isinstance(verdict, Deliver | Drop | Delay | Hold):
            raise ProgramCallRefused(
                "the module's link policy gave no verdict", reason="policy-error"
            )
        return verdict


_VERDICTS = Decoder()


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close: Callable[[], Awaitable[None]] | None = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def _int(value: object) -> int:
    return value if type(value) is int else -1


def _typed(exc: Exception) -> Exception:
    """What the module learns of a call that failed: a typed error as it is; any other only as
    a refusal naming its class (its message may hold the repr of the controller's objects)."""
    if isinstance(exc, SocietyError | LedgerError):
        return exc
    return ProgramCallRefused(
        f"the controller could not perform the call ({type(exc).__name__}): its arguments are "
        "not what the member takes",
        reason="call-failed",
    )


def not_running() -> ProgramCallRefused:
    return ProgramCallRefused("no program is running", reason="program-not-running")


def _cancelled() -> ProgramCallRefused:
    return ProgramCallRefused("the call was cancelled", reason="call-cancelled")
