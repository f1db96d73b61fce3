"""The root of Society Runner's typed errors, shared by both sides of a sandbox's wall.

The controller's groups (``controller.errors``) and the wire's ``NetworkError`` derive from it.
"""

from __future__ import annotations


class SocietyError(Exception):
    """Something ``controller`` could not do; ``reason`` is stable, the message names the next
    step."""

    reason: str = "society-error"
    next_step: str | None = None

    def __init__(
        self, detail: str, *, reason: str | None = None, next_step: str | None = None
    ) -> None:
        super().__init__(detail if next_step is None else f"{detail}\n  next step: {next_step}")
        if reason is not None:
            self.reason = reason
        if next_step is not None:
            self.next_step = next_step
        self.detail = detail
