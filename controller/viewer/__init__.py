"""Viewers: a static replay page of a run, and a live view that follows running runs.

Layer 10: they read ledgers (and the run files beside them) and never write to a run; nothing
below them imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller._lazy import lazy_exports

if TYPE_CHECKING:
    from controller.viewer.page import render_page
    from controller.viewer.records import RunLedger, read_run

_EXPORTS = {
    "RunLedger": "controller.viewer.records",
    "read_run": "controller.viewer.records",
    "render_page": "controller.viewer.page",
}

__all__ = ["RunLedger", "read_run", "render_page"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
