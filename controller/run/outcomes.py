"""The two closed outcomes of a run that reached ledger ownership."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ledger.records import LedgerReceipt

MAX_KEPT_VALUE_BYTES = 64 * 1024
"""The largest program value (as compact JSON) that the ledger, the result line and
``result.json`` keep; a larger one belongs in an event or an artifact of the run."""


@dataclass(frozen=True, slots=True)
class Success:
    """``execute`` returned ``value``; ``kept`` is it as JSON for the ledger and the result line
    (``None`` with ``note`` saying why when it cannot be kept)."""

    value: Any = None
    kept: Any = field(default=None, compare=False)
    note: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, value: Any) -> Success:
        kept, note = keep_value(value)
        return cls(value, kept, note)


def keep_value(value: Any) -> tuple[Any, str | None]:
    """``value`` as JSON data and ``None``, or ``None`` and a note saying why it is not kept: a
    value that is not JSON data (numbers, strings, booleans, null, lists, tuples, string-keyed
    dicts, pydantic models) or whose JSON is over ``MAX_KEPT_VALUE_BYTES``."""
    try:
        data = _json_data(value, depth=0)
        size = len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
    except _NotData as exc:
        return None, f"value-not-json: the program returned {exc}; return JSON data instead"
    if size > MAX_KEPT_VALUE_BYTES:
        return None, (
            f"value-too-large: the program's value is {size:,} bytes of JSON, over the "
            f"{MAX_KEPT_VALUE_BYTES:,}-byte cap; record large results as events or artifacts"
        )
    return data, None


@dataclass(frozen=True, slots=True)
class Unsent:
    """What the module's process returned that could not cross to the controller, described."""

    description: str


class _NotData(Exception):
    pass


def _json_data(value: Any, depth: int) -> Any:
    if depth > 64:
        raise _NotData("a value nested deeper than 64 levels")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotData(f"the number {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, list | tuple):
        return [_json_data(item, depth + 1) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise _NotData("a dict whose keys are not all strings")
        return {key: _json_data(item, depth + 1) for key, item in value.items()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Unsent):
        raise _NotData(value.description)
    raise _NotData(f"a {type(value).__qualname__}")


@dataclass(frozen=True, slots=True)
class Failure:
    """``execute`` raised ``error``; ``reason`` is the error's own ``reason`` when it has one."""

    error: BaseException
    reason: str
    detail: str


Exit = Success | Failure


@dataclass(frozen=True, slots=True)
class PlatformCause:
    """Why the platform failed the run: a machine-readable ``reason`` and what happened."""

    reason: str
    detail: str
    error: BaseException | None = None

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ProgramFinished:
    """The program ran once and ended with ``exit``; ``receipt`` is complete and signed."""

    exit: Exit
    receipt: LedgerReceipt
    reports: Mapping[str, Any] = field(default_factory=dict)
    """What the run's services reported (JSON-safe), e.g. ``usage`` from the model gateway."""

    @property
    def succeeded(self) -> bool:
        return isinstance(self.exit, Success)


@dataclass(frozen=True, slots=True)
class PlatformLost:
    """The platform failed (on the local profile: spawn failure, an agent lost before dispatch,
    admission refused). ``receipt`` is complete when finalization succeeded."""

    cause: PlatformCause
    receipt: LedgerReceipt
    reports: Mapping[str, Any] = field(default_factory=dict)
    """What the run's services reported (JSON-safe), e.g. ``usage`` from the model gateway."""

    @property
    def succeeded(self) -> bool:
        return False


Outcome = ProgramFinished | PlatformLost
