"""What crosses the module process's channel as data, and how it is rebuilt on the other side.

JSON carries ``None``, booleans, integers, strings and lists as themselves; everything else is a
one-key object whose key starts with ``$``: a mapping (``$map``), a tuple, set, bytes, duration,
path, a non-finite float, an event (``$event``: its wire form, decoded by the receiver's
catalog), a ledger record (``$record``), an event catalog (``$catalog``: its tags), a pydantic
model or dataclass of Society Runner's own data modules (``$model``/``$data``: rebuilt through
its constructor, so its own checks run), or a handle (``$handle``) on an object that stays on the
controller's side. Nothing else is encoded: a function, a module's own class or an open file
cannot cross, and decoding never imports a module outside ``DATA_MODULES`` nor calls anything
but a listed class's constructor.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import importlib.util
import math
import pkgutil
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import PurePath
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from controller.errors import SocietyError
from ledger.events import Event, EventCatalog
from ledger.format import RecordEnvelope
from ledger.records import Record

DATA_MODULES = (
    "society_sandbox.runtimes",
    "controller.agents",
    "controller.modelgateway",
    "controller.network.limits",
    "controller.network.links",
    "society_sandbox.network.protocol",
    "controller.services",
    "controller.agents.termination",
    "ledger.records",
)
"""Where a ``$model`` or ``$data`` class may come from (a module or a package of modules)."""


def _data_module_names() -> frozenset[str]:
    """Every module a class may be rebuilt from, by exact name: ``DATA_MODULES`` with each
    package's public modules listed (found without importing them; no ``__main__``, no private
    module), so decoding imports nothing a name merely starts like."""
    names: set[str] = set()
    for name in DATA_MODULES:
        names.add(name)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            names.update(
                f"{name}.{found.name}"
                for found in pkgutil.iter_modules(spec.submodule_search_locations)
                if not found.name.startswith("_") and not found.ispkg
            )
    return frozenset(names)


DATA_MODULE_NAMES = _data_module_names()
MAX_DEPTH = 64


class CodecError(SocietyError):
    """A value cannot cross the channel, or what arrived is not a value this side rebuilds."""

    reason = "value-not-data"


Export = Callable[[object], dict[str, Any] | None]
"""A side's hook: the whole encoded form of an object it passes by reference (a ``$handle`` on
the controller's object, a ``$policy`` the module process evaluates), ``None`` for data."""
Resolve = Callable[[Mapping[str, Any]], object]
"""Turns an arriving ``$handle`` into an object (the controller's own, or a module-side proxy)."""
EventDecoder = Callable[[Mapping[str, Any]], Event]
RecordDecoder = Callable[[Mapping[str, Any]], Record]


MAX_UNSENT_CHARS = 512
"""How much of the description of a value that cannot cross the channel crosses instead."""


def encode(value: object, export: Export | None = None, depth: int = 0) -> Any:
    """``value`` as JSON-ready data; ``CodecError`` for what cannot cross."""
    if depth > MAX_DEPTH:
        raise CodecError(f"a value nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if export is not None:
        reference = export(value)
        if reference is not None:
            return reference
    inner = depth + 1
    if isinstance(value, list):
        return [encode(item, export, inner) for item in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"$tuple": [encode(item, export, inner) for item in value]}
    if isinstance(value, frozenset | set):
        return {"$set": [encode(item, export, inner) for item in value]}
    if isinstance(value, dict | MappingProxyType):
        if not all(isinstance(key, str) for key in value):
            raise CodecError("a mapping crosses the channel only with str keys")
        return {"$map": {key: encode(item, export, inner) for key, item in value.items()}}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, timedelta):
        return {"$seconds": value.total_seconds()}
    if isinstance(value, PurePath):
        return {"$path": str(value)}
    if isinstance(value, Event):
        return {"$event": value.to_wire()}
    if isinstance(value, Record):
        return {"$record": record_wire(value)}
    if isinstance(value, EventCatalog):
        return {"$catalog": value.tags}
    cls = type(value)
    if isinstance(value, BaseModel) and _listed(cls):
        return {"$model": [_name(cls), value.model_dump(mode="json", by_alias=True)]}
    if dataclasses.is_dataclass(value) and _listed(cls):
        fields = {
            field.name: encode(getattr(value, field.name), export, inner)
            for field in dataclasses.fields(value)
            if field.init
        }
        return {"$data": [_name(cls), fields]}
    raise CodecError(
        f"a {cls.__module__}.{cls.__qualname__} cannot cross to the controller: only data "
        f"(str, numbers, lists, dicts, tuples, bytes, events, Society Runner's own data classes) "
        f"and the handles the controller gave does",
    )


def _no_reference(body: Mapping[str, Any]) -> object:
    raise CodecError("a handle does not cross this way")


def _no_event(wire: Mapping[str, Any]) -> Event:
    raise CodecError("an event does not cross this way")


@dataclasses.dataclass(frozen=True, slots=True)
class Decoder:
    """How this side rebuilds what arrives: its handles, its events, its records (by default,
    data only: a handle or an event is refused)."""

    resolve: Resolve = _no_reference
    event: EventDecoder = _no_event
    record: RecordDecoder | None = None
    catalog: Callable[[list[str]], EventCatalog] | None = None
    policy: Callable[[int], object] | None = None
    """Turns a ``$policy`` (a link policy the module process evaluates) into a callable."""

    def decode(self, value: Any, depth: int = 0) -> Any:
        """Rebuild ``value``; ``CodecError`` for anything malformed or not allowed."""
        if depth > MAX_DEPTH:
            raise CodecError(f"a value nests deeper than {MAX_DEPTH} levels")
        if value is None or isinstance(value, bool | int | float | str):
            return value
        inner = depth + 1
        if isinstance(value, list):
            return [self.decode(item, inner) for item in value]
        if not isinstance(value, dict) or len(value) != 1:
            raise CodecError(f"{_short(value)} is not an encoded value")
        ((key, body),) = value.items()
        try:
            return self._tagged(key, body, inner)
        except (CodecError, SocietyError):
            raise
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise CodecError(f"an encoded {key} could not be rebuilt: {exc}") from None

    def _tagged(self, key: str, body: Any, inner: int) -> Any:
        if key == "$map":
            if not isinstance(body, dict):
                raise CodecError("$map holds no object")
            return {name: self.decode(item, inner) for name, item in body.items()}
        if key == "$tuple":
            return tuple(self.decode(item, inner) for item in _list(body, key))
        if key == "$set":
            return frozenset(self.decode(item, inner) for item in _list(body, key))
        if key == "$bytes":
            return base64.b64decode(_str(body, key), validate=True)
        if key == "$float":
            text = _str(body, key)
            if text not in ("nan", "inf", "-inf"):
                raise CodecError(f"$float {text!r} is not nan or ±inf")
            return float(text)
        if key == "$seconds":
            if not isinstance(body, int | float) or isinstance(body, bool):
                raise CodecError("$seconds holds no number")
            return timedelta(seconds=body)
        if key == "$path":
            return PurePath(_str(body, key))
        if key == "$event":
            if not isinstance(body, dict):
                raise CodecError("$event holds no object")
            return self.event(body)
        if key == "$record":
            if self.record is None or not isinstance(body, dict):
                raise CodecError("a ledger record does not cross this way")
            return self.record(body)
        if key == "$catalog":
            if self.catalog is None:
                raise CodecError("an event catalog does not cross this way")
            tags = _list(body, key)
            if not all(isinstance(tag, str) for tag in tags):
                raise CodecError("$catalog holds a tag that is not a str")
            return self.catalog(tags)
        if key == "$policy":
            if self.policy is None or type(body) is not int:
                raise CodecError("a link policy does not cross this way")
            return self.policy(body)
        if key == "$handle":
            if not isinstance(body, dict):
                raise CodecError("$handle holds no object")
            return self.resolve(body)
        if key in ("$model", "$data"):
            name, fields = _list(body, key) if len(_list(body, key)) == 2 else (None, None)
            cls = data_class(_str(name, key))
            if key == "$model":
                if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
                    raise CodecError(f"{name} is not a pydantic model")
                return cls.model_validate(fields)
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                raise CodecError(f"{name} is not a dataclass")
            if not isinstance(fields, dict):
                raise CodecError("$data holds no fields")
            accepted = {field.name for field in dataclasses.fields(cls) if field.init}
            unknown = sorted(set(fields) - accepted)
            if unknown:
                raise CodecError(f"{name} takes no fields {unknown}")
            return cls(**{field: self.decode(item, inner) for field, item in fields.items()})
        raise CodecError(f"{key!r} is not a kind of encoded value")


def data_class(name: str) -> type:
    """The listed class ``module:qualname`` (``CodecError`` for any other)."""
    module_name, _, qualname = name.partition(":")
    if not qualname or not _allowed_module(module_name):
        raise CodecError(f"{name!r} is not one of Society Runner's data classes")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError:
        raise CodecError(f"{module_name} cannot be imported here") from None
    for part in qualname.split("."):
        if part.startswith("_") and part != "__dict__":
            raise CodecError(f"{name!r} names a private class")
        target = getattr(target, part, None)
    if not isinstance(target, type) or _name(target) != name:
        raise CodecError(f"{name!r} is not a class defined there")
    return target


def record_wire(record: Record) -> dict[str, Any]:
    return dict(record.envelope.model_dump(mode="json", by_alias=True))


def record_from_wire(catalog: EventCatalog, wire: Mapping[str, Any]) -> Record:
    envelope = RecordEnvelope.model_validate(wire)
    return Record(envelope, catalog.decode(envelope.event))


def _listed(cls: type) -> bool:
    return _allowed_module(cls.__module__) and "<locals>" not in cls.__qualname__


def _allowed_module(name: str) -> bool:
    return name in DATA_MODULE_NAMES


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _list(body: Any, key: str) -> list[Any]:
    if not isinstance(body, list):
        raise CodecError(f"{key} holds no list")
    return body


def _str(body: Any, key: str) -> str:
    if not isinstance(body, str):
        raise CodecError(f"{key} holds no str")
    return body


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
