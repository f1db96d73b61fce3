"""The life every Python runtime shares: one router session, the runtime's tasks beside it, until
the runtime stops or the session is gone for good.

A runtime hands ``live_session`` its workers (each gets the session) and its stop event; the
session's own watcher raises ``ConnectionError`` once the router has been unreachable for
``patience_s`` (the client reconnects within that time by itself). A runtime that drives its own
tasks opens the session with ``connect_router``. ``run_agent`` is a program's ``main``,
``stop_on_signal`` its stop, and ``say`` its account of itself on stderr (its ``output.log``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, NoReturn

import anyio

from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.network.client import AgentSession, connect_agent

ROUTER_LOST_AFTER_ENV = "SOCIETY_ROUTER_LOST_AFTER_S"
"""How long (seconds) a runtime waits for a router it lost before it gives up; default 10."""
ROUTER_LOST_AFTER_S = 10.0

Worker = Callable[[Any], Coroutine[Any, Any, None]]


def router_patience() -> float:
    """``ROUTER_LOST_AFTER_ENV`` when set, else ``ROUTER_LOST_AFTER_S``."""
    return float(os.environ.get(ROUTER_LOST_AFTER_ENV) or ROUTER_LOST_AFTER_S)


async def live_session(
    config: BootConfig,
    secrets: Secrets,
    stop: anyio.Event,
    workers: Sequence[Worker],
    *,
    on_connect: Callable[[Any], None],
    patience_s: float | None = None,
) -> None:
    """Connect, call ``on_connect(session)``, run ``workers`` until ``stop`` is set; raises what
    ended the session otherwise (``ConnectionError`` for a router lost for ``patience_s``)."""
    patience = router_patience() if patience_s is None else patience_s
    async with connect_router(config, secrets) as session:
        on_connect(session)
        async with anyio.create_task_group() as tasks:
            for worker in workers:
                tasks.start_soon(worker, session)
            tasks.start_soon(watch_router, session, patience)
            await stop.wait()
            tasks.cancel_scope.cancel()


def connect_router(
    config: BootConfig, secrets: Secrets
) -> AbstractAsyncContextManager[AgentSession]:
    """The agent's own router session, with its router token, where its boot config says."""
    return connect_agent(
        config.router_url,
        secrets.router_token,
        ca_file=config.router_ca_file,
        unix_path=config.router_socket,
        address=config.router_address,
    )


async def watch_router(session: Any, patience_s: float) -> None:
    """Raise ``ConnectionError`` once ``session`` has been disconnected for ``patience_s``."""
    lost_at: float | None = None
    while True:
        await anyio.sleep(0.1)
        if session.connected:
            lost_at = None
        elif lost_at is None:
            lost_at = anyio.current_time()
        elif anyio.current_time() - lost_at > patience_s:
            raise ConnectionError(f"no router for {patience_s:g} s")


def leaf(exc: BaseException) -> BaseException:
    """The first exception inside nested exception groups: what really ended the session."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def stop_on_signal(stop: Callable[[], object]) -> None:
    """Call ``stop`` on each SIGTERM (the platform's stop) or SIGINT."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop()


def say(program: str, line: str) -> None:
    """One line of ``program``'s account of itself, on stderr (the agent's ``output.log``)."""
    print(f"{program}: {line}", file=sys.stderr, flush=True)


def run_agent(
    program: str,
    start: Callable[[BootConfig, Path], int],
    *,
    unready: tuple[type[Exception], ...] = (),
) -> NoReturn:
    """A program's ``main``: ``start`` it with its boot config in its working directory and exit
    with its code; a sandbox not set up as the boot contract says (``BootError``, a file missing
    or invalid, or one of ``unready``) exits 2."""
    not_set_up: tuple[type[Exception], ...] = (BootError, OSError, ValueError, *unready)
    try:
        code = start(BootConfig.from_environment(), Path.cwd())
    except not_set_up as exc:
        say(program, f"{type(exc).__name__}: {exc}")
        code = 2
    sys.exit(code)
