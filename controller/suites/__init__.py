"""Suites: many runs of one experiment across competitors and seeds, graded, ranked, verifiable.

Layer 10: suites start runs through the public ``society run`` command and read ledgers;
nothing below them imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller._lazy import lazy_exports

if TYPE_CHECKING:
    from controller.suites.definition import Suite, SuiteError, load_suite

_EXPORTS = {
    "Suite": "controller.suites.definition",
    "SuiteError": "controller.suites.definition",
    "load_suite": "controller.suites.definition",
}

__all__ = ["Suite", "SuiteError", "load_suite"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
