"""A task group owned by a ``with`` block whose own exception propagates unwrapped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup


@asynccontextmanager
async def owned_task_group() -> AsyncIterator[TaskGroup]:
    """Tasks live as long as the block; leaving it cancels them.

    An exception from the block itself is re-raised as it is (not inside an ``ExceptionGroup``),
    so a caller's ``except ValueError`` around the block keeps working; failing tasks still raise
    an ``ExceptionGroup``.
    """
    body_error: BaseException | None = None
    async with anyio.create_task_group() as tasks:
        try:
            yield tasks
        except BaseException as exc:
            body_error = exc
        finally:
            tasks.cancel_scope.cancel()
    if body_error is not None:
        raise body_error
