"""The module process's ``ctx``: proxies of the controller's objects, and the link they call over.

A proxy is a subclass of the exported class (so ``isinstance`` and ``ctx.agents.owner(name,
OwnerClass)`` hold) whose listed members (``exports``) become calls on the channel: a property,
a method, an ``async with`` block the controller holds open, an iterator pulled item by item.
Errors come back as the controller's own classes where this process has them; a link policy
passed to the controller stays here and is evaluated when the router asks.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NoReturn

import anyio

from controller.errors import SocietyError
from controller.program import exports
from controller.program.codec import CodecError, Decoder, encode, record_from_wire
from controller.program.wire import Channel, Frame, error_frame
from ledger.events import Event, EventCatalog
from ledger.records import Record

EXCEPTION_MODULES = ("controller", "ledger", "society_sandbox")


class ControllerRefused(SocietyError):
    """The controller answered a call with an error of a class this process does not rebuild."""

    reason = "controller-refused"


class Link:
    """This process's end of the channel: calls on the controller's handles, and their proxies."""

    def __init__(self, channel: Channel, catalog: EventCatalog) -> None:
        self.channel = channel
        self.catalog = catalog
        self._proxies: dict[int, object] = {}
        self.policies: dict[int, Callable[..., object]] = {}
        self.decoder = Decoder(
            resolve=self._proxy,
            event=catalog.decode,
            record=lambda wire: record_from_wire(catalog, wire),
        )

    def encode(self, value: object) -> Any:
        return encode(value, self._reference)

    def _reference(self, value: object) -> dict[str, Any] | None:
        if isinstance(value, RemoteHandle):
            return {"$handle": {"id": value._society_handle}}
        if callable(value) and not isinstance(value, type):
            if inspect.iscoroutinefunction(value):
                raise TypeError(
                    f"a link policy is a plain function of one LinkDelivery returning a verdict, "
                    f"not {value!r}"
                )
            number = len(self.policies) + 1
            self.policies[number] = value
            return {"$policy": number}
        return None

    def evaluate(self, call_id: object, number: object, delivery: object) -> None:
        """The verdict of the module's link policy ``number`` on ``delivery`` (the host's policy
        thread)."""
        try:
            policy = self.policies[number] if type(number) is int else None
            if policy is None:
                raise ControllerRefused("no such link policy")
            verdict = policy(self.decoder.decode(delivery))
            answer = encode(verdict)
        except Exception as exc:
            self.channel.reply(call_id, error=error_frame(exc))
            return
        self.channel.reply(call_id, value=answer)

    def answer(self, frame: Frame) -> Any:
        if frame.get("op") == "error":
            raise_remote(frame.get("error"))
        return self.decoder.decode(frame.get("value"))

    async def call(
        self, target: int, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        request = self._call_frame(target, name, args, kwargs)
        return self.answer(await self.channel.request(request))

    def call_sync(
        self,
        target: int,
        name: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        request = self._call_frame(target, name, args, kwargs or {})
        return self.answer(self.channel.request_sync(request))

    async def op(self, op: str, target: int, **fields: Any) -> Any:
        return self.answer(await self.channel.request({"op": op, "target": target, **fields}))

    def _call_frame(
        self, target: int, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Frame:
        return {
            "op": "call",
            "target": target,
            "name": name,
            "args": [self.encode(arg) for arg in args],
            "kwargs": self.encode(kwargs),
        }

    def _proxy(self, body: Mapping[str, Any]) -> object:
        handle = body.get("id")
        if type(handle) is not int:
            raise CodecError("a handle without an id")
        known = self._proxies.get(handle)
        if known is not None:
            return known
        name = body.get("class")
        if not isinstance(name, str) or name not in exports.EXPORTED:
            raise CodecError(f"{name!r} is not an exported class")
        static = body.get("static") or {}
        values = {key: self.decoder.decode(value) for key, value in static.items()}
        proxy = _new_proxy(proxy_class(name), self, handle, values)
        self._proxies[handle] = proxy
        return proxy


class RemoteHandle:
    """Marks a proxy: an object that stays in the controller, named by ``_society_handle``."""

    _society_handle: int
    _society_link: Link
    _society_static: dict[str, Any]


def _new_proxy(cls: type, link: Link, handle: int, static: dict[str, Any]) -> object:
    proxy: Any = object.__new__(cls)
    proxy.__dict__.update(_society_handle=handle, _society_link=link, _society_static=static)
    return proxy


_CLASSES: dict[str, type] = {}


def proxy_class(name: str) -> type:
    """A subclass of the exported class ``name`` whose listed members reach the controller."""
    cached = _CLASSES.get(name)
    if cached is not None:
        return cached
    module_name, _, qualname = name.partition(":")
    base: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        base = getattr(base, part)
    namespace: dict[str, Any] = {"__module__": __name__, "__qualname__": f"Remote{base.__name__}"}
    for member, kind in exports.EXPORTED[name].items():
        namespace[member] = _forwarder(member, kind)
    if "wait" in exports.EXPORTED[name]:
        namespace["__await__"] = lambda self: self.wait().__await__()
    namespace.update(_LOCAL.get(name, {}))
    namespace["__repr__"] = lambda self: f"<{base.__name__} in the controller>"
    cls = type(f"Remote{base.__name__}", (RemoteHandle, base), namespace)
    _CLASSES[name] = cls
    return cls


def _forwarder(member: str, kind: str) -> Any:
    if kind == exports.STATIC:
        return property(lambda self: self._society_static.get(member))
    if kind == exports.PROPERTY:
        return property(lambda self: self._society_link.call_sync(self._society_handle, member))
    if kind == exports.SYNC:

        def sync(self: RemoteHandle, *args: Any, **kwargs: Any) -> Any:
            return self._society_link.call_sync(self._society_handle, member, args, kwargs)

        return sync
    if kind == exports.ASYNC:

        async def call(self: RemoteHandle, *args: Any, **kwargs: Any) -> Any:
            return await self._society_link.call(self._society_handle, member, args, kwargs)

        return call
    if kind == exports.ENTER:

        async def enter(self: RemoteHandle) -> Any:
            return await self._society_link.call(self._society_handle, member, (), {})

        return enter
    if kind == exports.EXIT:

        async def leave(self: RemoteHandle, *exc_info: object) -> None:
            with anyio.CancelScope(shield=True):
                await self._society_link.call(self._society_handle, member, (), {})

        return leave
    if kind == exports.CONTEXT:
        return lambda self, *args, **kwargs: _RemoteBlock(self, member, args, kwargs)
    if kind == exports.ITERATOR:
        return lambda self, *args, **kwargs: _RemoteIterator(self, member, args, kwargs)
    raise AssertionError(kind)


class _RemoteCall:
    """A member call on a proxy that the controller answers with a block or an iterator."""

    def __init__(
        self, owner: RemoteHandle, member: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self._owner = owner
        self._call = (member, args, kwargs)

    async def _open(self) -> Any:
        member, args, kwargs = self._call
        return await self._owner._society_link.call(
            self._owner._society_handle, member, args, kwargs
        )


class _RemoteBlock(_RemoteCall):
    """``async with proxy.member(...)``: the controller enters the block and holds it open."""

    _block: int | None = None

    async def __aenter__(self) -> Any:
        entered = await self._open()
        self._block = entered["block"]
        return entered["value"]

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        if self._block is not None:
            with anyio.CancelScope(shield=True):
                await self._owner._society_link.op(
                    "leave", self._block, failed=exc_type is not None
                )


class _RemoteIterator(_RemoteCall):
    """``async for item in proxy.member(...)``: each item is pulled from the controller."""

    _iterator: int | None = None
    _done = False

    def __aiter__(self) -> _RemoteIterator:
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        if self._iterator is None:
            self._iterator = (await self._open())["iterator"]
        step = await self._owner._society_link.op("next", self._iterator)
        if step.get("done"):
            self._done = True
            raise StopAsyncIteration
        return step["item"]

    async def aclose(self) -> None:
        if self._iterator is not None and not self._done:
            self._done = True
            with anyio.CancelScope(shield=True):
                await self._owner._society_link.op("close", self._iterator)


def _ledger_catalog(self: Any) -> EventCatalog:
    catalog: EventCatalog = self._society_link.catalog
    return catalog


async def _ledger_events(self: Any, event_class: type[Event]) -> AsyncIterator[Event]:
    async for record in self.records():
        if isinstance(record, Record) and isinstance(record.event, event_class):
            yield record.event


_LOCAL: Mapping[str, Mapping[str, Any]] = {
    "controller.run.context:LedgerView": {
        "catalog": property(_ledger_catalog),
        "events": _ledger_events,
    },
    "controller.run.context:CustomerEvents": {"catalog": property(_ledger_catalog)},
}
"""What a proxy answers in this process: the catalog is the module's own."""


def raise_remote(error: object) -> NoReturn:
    """Raise the controller's error as its own class where this process has it."""
    fields = error if isinstance(error, dict) else {}
    message = str(fields.get("message") or "the controller refused the call")
    reason = fields.get("reason") if isinstance(fields.get("reason"), str) else None
    next_step = fields.get("next_step") if isinstance(fields.get("next_step"), str) else None
    cls = _exception_class(fields.get("module"), fields.get("type"))
    exc: BaseException | None = None
    if cls is not None and issubclass(cls, SocietyError):
        exc = cls.__new__(cls)
        SocietyError.__init__(exc, message, reason=reason, next_step=next_step)
    elif cls is not None:
        with contextlib.suppress(Exception):
            exc = cls(message)
            if reason is not None:
                with contextlib.suppress(Exception):
                    exc.reason = reason  # type: ignore[attr-defined]
    if exc is None:
        exc = ControllerRefused(
            f"{fields.get('type')}: {message}", reason=reason or "controller-refused"
        )
    raise exc


def _exception_class(module: object, qualname: object) -> type[BaseException] | None:
    if not isinstance(module, str) or not isinstance(qualname, str) or "." in qualname:
        return None
    if module == "builtins":
        found = getattr(builtins, qualname, None)
    elif module.split(".")[0] in EXCEPTION_MODULES and module in sys.modules:
        found = getattr(sys.modules[module], qualname, None)
    else:
        return None
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    return None
