"""The caller's cancellation, turned into a request the kernel honours while it finalizes.

Cancelling the caller's scope would also cancel the ledger's committer, the router and the
sandboxes that finalization still needs. Inside ``relayed_cancellation()`` they are shielded;
the caller's cancellation only interrupts the scopes marked ``interruptible()`` (readiness and
the program), and is raised again once the block, finalization included, is done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio


class Interruption:
    """Whether, and why, the caller asked the run to stop."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._scopes: list[anyio.CancelScope] = []

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        for scope in self._scopes:
            scope.cancel()

    @contextmanager
    def interruptible(self) -> Iterator[anyio.CancelScope]:
        """A scope the interruption cancels (at once, when it was already requested)."""
        scope = anyio.CancelScope()
        if self.reason is not None:
            scope.cancel()
        self._scopes.append(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.remove(scope)


@asynccontextmanager
async def relayed_cancellation() -> AsyncIterator[Interruption]:
    """Shield the block from the caller's cancel scopes, relaying their cancellation instead.

    A native ``Task.cancel()`` still raises inside the block (asyncio delivers it once); the
    kernel finalizes on that path too.
    """
    interruption = Interruption()
    finished = False

    async def relay() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            if not finished:
                interruption.request("cancelled")

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay)
            try:
                with anyio.CancelScope(shield=True):
                    yield interruption
            finally:
                finished = True
                tasks.cancel_scope.cancel()
    except ExceptionGroup as group:  # the block's own error, not the relay's group around it
        if len(group.exceptions) != 1:
            raise
        error = group.exceptions[0]
        raise error from error.__cause__
    if interruption.reason is not None:
        await anyio.lowlevel.checkpoint()  # raises the caller's cancellation
        raise anyio.get_cancelled_exc_class()()
