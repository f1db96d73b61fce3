"""The two closed outcomes of a run that reached ledger ownership."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.records import LedgerReceipt


@dataclass(frozen=True, slots=True)
class Success:
    """``execute`` returned ``value``."""

    value: Any = None


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
