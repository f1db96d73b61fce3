"""The launcher of a ``byo`` agent: the researcher's program as its child, in the sandbox.

It checks the declared packages, serves the model relay on loopback when the program was granted
a model (``OPENAI_BASE_URL`` and ``ANTHROPIC_BASE_URL`` point at it; both keys are the agent's
own gateway token; every call names the granted model), starts the program, serves the owner
handle (``state``, ``instruct`` in stdio mode, ``stop``) and, in stdio mode, is the agent's router
session (``agent_images.byo.stdio``). A stop (SIGTERM or the owner's) reaches the program as
a ``stop`` line and the end of its stdin (stdio) or as SIGTERM (client).

Exit codes: the program's own (128 + N when a signal N ended it; 0 when it ended on the stop it
was asked for); 2 when the sandbox was not set up as the boot contract says, a declared package
is missing, or the program cannot be started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, SocketAttribute, SocketListener, TaskGroup

from agent_images.byo import stdio
from agent_images.model_relay import ANTHROPIC_MESSAGES, OPENAI_COMPLETIONS, ModelRelay
from agent_images.router_session import connect_router, run_agent, say, stop_on_signal
from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.owner_api import OwnerApiServer, OwnerHandlers, OwnerRefusal
from society_sandbox.packages import unmet
from society_sandbox.runtimes.byo import (
    BYO_CONFIG_FILE,
    PYTHON_NAMES,
    BYOSettings,
    InstructionFrame,
    StopFrame,
)
from society_sandbox.runtimes.llm import (
    GATEWAY_SOCKET_VARIABLE,
    GATEWAY_TOKEN_CREDENTIAL,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
)

PROGRAM = "byo"
REFUSAL_WAIT_S = 30.0
"""How long a launcher whose program cannot start waits for the controller to ask it why."""
STOP_GRACE_S = 3.0
"""After a stop, how long the program may take to end before the launcher kills it."""
HIDDEN = (GATEWAY_URL_VARIABLE, GATEWAY_SOCKET_VARIABLE)
"""The gateway's own address: the program reaches it only through the relay."""


def child_environment(
    inherited: Mapping[str, str], relays: Mapping[str, str], mode: str
) -> dict[str, str]:
    """The program's environment: the sandbox's (the descriptor's variables, the boot contract's),
    without the gateway's own address, plus the relay's variables. A stdio program gets no router
    or bridge variable: the launcher is its session."""
    hidden = set(HIDDEN)
    if mode == "stdio":
        hidden |= {
            name for name in inherited if name.startswith(("SOCIETY_ROUTER", "SOCIETY_BRIDGE"))
        }
    return {**{k: v for k, v in inherited.items() if k not in hidden}, **relays}


def program_argv(command: tuple[str, ...]) -> list[str]:
    """``python`` and ``python3`` are the agents' own interpreter (where declared packages are)."""
    head, *rest = command
    return [sys.executable if head in PYTHON_NAMES else head, *rest]


class BYOLauncher:
    """One program's life in the sandbox."""

    def __init__(self, config: BootConfig, secrets: Secrets, settings: BYOSettings) -> None:
        self.config = config
        self.secrets = secrets
        self.settings = settings
        self.process: Process | None = None
        self.channel: stdio.StdioChannel | None = None
        self.relays: list[ModelRelay] = []
        self.stop_reason: str | None = None
        self.stopping = anyio.Event()

    def state(self) -> dict[str, Any]:
        process = self.process
        channel = self.channel
        return {
            "name": self.config.agent_name,
            "mode": self.settings.mode,
            "command": list(self.settings.command),
            "pid": process.pid if process else None,
            "running": process is not None and process.returncode is None,
            "exitCode": process.returncode if process else None,
            "received": channel.received if channel else None,
            "sent": channel.sent if channel else None,
            "refusedLines": channel.refused_lines if channel else None,
            "modelCalls": sum(relay.calls for relay in self.relays),
            "stopping": self.stopping.is_set(),
        }

    async def instruct(self, text: str, peers: tuple[str, ...]) -> None:
        if self.channel is None:
            raise OwnerRefusal("the program is not running", reason="not-ready")
        await self.channel.write(InstructionFrame(text=text))

    def stop(self, reason: str = "signal") -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stopping.set()

    async def live(self, listener: SocketListener) -> int:
        handlers = OwnerHandlers(
            state=self.state,
            instruct=self.instruct if self.settings.mode == "stdio" else None,
            stop=self.stop,
        )
        bridge = OwnerApiServer(listener, self.secrets.bridge_token, handlers)
        async with AsyncExitStack() as stack:
            relays = await stack.enter_async_context(self._relays())
            tasks = await stack.enter_async_context(anyio.create_task_group())
            tasks.start_soon(bridge.serve)
            tasks.start_soon(stop_on_signal, self.stop)
            session = None
            if self.settings.mode == "stdio":
                session = await stack.enter_async_context(connect_router(self.config, self.secrets))
            environment = child_environment(os.environ, relays, self.settings.mode)
            code = await self._run_child(tasks, environment, session)
            await bridge.announce(
                {
                    "outcome": "completed" if code == 0 else "failed",
                    "detail": None if code == 0 else f"the program exited with {code}",
                    "state": self.state(),
                }
            )
            tasks.cancel_scope.cancel()
        for relay in self.relays:
            await relay.aclose()
        return code

    async def _run_child(self, tasks: TaskGroup, environment: dict[str, str], session: Any) -> int:
        stdio_mode = session is not None
        try:
            process = await anyio.open_process(
                program_argv(self.settings.command),
                stdin=subprocess.PIPE if stdio_mode else subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdio_mode else None,
                stderr=None,
                env=environment,
            )
        except OSError as exc:
            say(PROGRAM, f"cannot start {self.settings.command[0]!r}: {exc}")
            return 2
        self.process = process
        say(PROGRAM, f"started {' '.join(self.settings.command)} (pid {process.pid})")
        if stdio_mode:
            assert process.stdin is not None and process.stdout is not None
            self.channel = channel = stdio.StdioChannel(process.stdin)
            await stdio.greet(channel, session)
            tasks.start_soon(stdio.deliver, channel, session)
            tasks.start_soon(stdio.relay_requests, channel, session, process.stdout)
        tasks.start_soon(self._stop_when_asked, process)
        returncode = await process.wait()
        if returncode == -signal.SIGTERM and not self.stopping.is_set():
            # the platform signals every process of the sandbox: the launcher's own SIGTERM may
            # be handled just after the program ended of it
            with anyio.move_on_after(0.5):
                await self.stopping.wait()
        if returncode < 0:
            if self.stopping.is_set() and -returncode in (signal.SIGTERM, signal.SIGKILL):
                code = 0
            else:
                code = 128 - returncode
        else:
            code = returncode
        say(
            PROGRAM,
            f"the program exited with {returncode}"
            + (f" ({self.stop_reason})" if self.stop_reason else ""),
        )
        return code

    async def _stop_when_asked(self, process: Process) -> None:
        await self.stopping.wait()
        if self.channel is not None:
            await self.channel.write(StopFrame(reason=self.stop_reason or "signal"))
            await self.channel.close()
        else:
            _signal(process, signal.SIGTERM)
        with anyio.move_on_after(STOP_GRACE_S):
            await process.wait()
            return
        if self.channel is not None:
            _signal(process, signal.SIGTERM)
            with anyio.move_on_after(STOP_GRACE_S):
                await process.wait()
                return
        _signal(process, signal.SIGKILL)

    @asynccontextmanager
    async def _relays(self) -> AsyncIterator[dict[str, str]]:
        """The loopback relay's variables for the program (none without a model)."""
        if not self.settings.model:
            yield {}
            return
        base_url, model = os.environ.get(GATEWAY_URL_VARIABLE), os.environ.get(MODEL_VARIABLE)
        token = self.secrets.credentials.get(GATEWAY_TOKEN_CREDENTIAL)
        if not base_url or not model or not token:
            raise BootError(
                f"the sandbox lacks {GATEWAY_URL_VARIABLE}, {MODEL_VARIABLE} or the "
                f"{GATEWAY_TOKEN_CREDENTIAL} credential; the run's model service grants them"
            )
        socket = os.environ.get(GATEWAY_SOCKET_VARIABLE)
        openai = ModelRelay(
            base_url, token, api=OPENAI_COMPLETIONS, unix_socket=socket, model=model
        )
        anthropic = ModelRelay(
            base_url, token, api=ANTHROPIC_MESSAGES, unix_socket=socket, model=model
        )
        self.relays = [openai, anthropic]
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as openai_listener,
            await anyio.create_tcp_listener(local_host="127.0.0.1") as anthropic_listener,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(openai_listener.serve, openai.serve)
            tasks.start_soon(anthropic_listener.serve, anthropic.serve)
            openai_port = openai_listener.extra(SocketAttribute.local_port)
            anthropic_port = anthropic_listener.extra(SocketAttribute.local_port)
            yield {
                "OPENAI_BASE_URL": f"http://127.0.0.1:{openai_port}/v1",
                "OPENAI_API_KEY": token,
                "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{anthropic_port}",
                "ANTHROPIC_API_KEY": token,
            }
            tasks.cancel_scope.cancel()


def _signal(process: Process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass


async def refuse_to_start(
    listener: SocketListener, secrets: Secrets, reason: str, detail: str
) -> None:
    """Serve the bridge only to refuse ``state`` with why, until that was said once (or
    ``REFUSAL_WAIT_S`` without anyone asking)."""

    def state() -> dict[str, Any]:
        raise OwnerRefusal(detail, reason=reason)

    bridge = OwnerApiServer(listener, secrets.bridge_token, OwnerHandlers(state=state))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge.serve)
        with anyio.move_on_after(REFUSAL_WAIT_S):
            await bridge.refused.wait()
        tasks.cancel_scope.cancel()


async def run(config: BootConfig, settings: BYOSettings) -> int:
    secrets = Secrets.read(config.secrets_file)
    listener = await SocketListener.from_socket(config.bridge_socket())
    missing = unmet(settings.packages)
    if missing:
        shown = ", ".join(str(item) for item in missing)
        wanted = " ".join(f"'{item.requirement}'" for item in missing)
        detail = (
            f"program: it needs {shown}, which the agents' Python ({sys.executable}) lacks: "
            f"install it there (`{sys.executable} -m pip install {wanted}`), or drop it from "
            "byo(..., packages=...)"
        )
        say(PROGRAM, detail)
        await refuse_to_start(listener, secrets, "package-missing", detail)
        return 2
    return await BYOLauncher(config, secrets, settings).live(listener)


def start(config: BootConfig, workdir: Path) -> int:
    settings = BYOSettings.model_validate_json((workdir / BYO_CONFIG_FILE).read_bytes())
    return anyio.run(run, config, settings)


def main() -> None:
    run_agent(PROGRAM, start)
