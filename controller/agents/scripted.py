"""The ``scripted`` runtime, controller side: its descriptor and its bridge (``ScriptedGateway``).

The agent program lives in ``agent_images/scripted``; it needs no model and no key.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
from anyio.abc import SocketStream, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from agent_images.scripted.policy import POLICY_FILE, ScriptedPolicy
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    SecretRef,
)
from controller.agents.termination import (
    Completed,
    Failed,
    Observation,
    ProcessExit,
    Termination,
)

SCRIPTED_IMAGE = "society/scripted:dev"
"""The locally built image; cluster profiles need it pinned by digest (``image=...@sha256:...``)."""

SCRIPTED_COMMAND = ("python", "-m", "agent_images.scripted")
SCRIPTED_RESOURCES = Resources(cpu=0.02, memory_mib=64, memory_limit_mib=1536)
"""A scripted agent idles at ~40 MiB resident; 50 of them fit one core's admission budget."""
_MAX_LINE = 1024 * 1024
_REPORT_GRACE_S = 1.0


class GatewayError(Exception):
    """The scripted gateway refused a request or went away; ``reason`` is machine-readable."""

    def __init__(self, detail: str, *, reason: str) -> None:
        super().__init__(detail)
        self.reason = reason


class ScriptedGateway:
    """The scripted agent's owner-local API: ``instruct``, ``state``, ``stop``."""

    def __init__(self, agent: str, stream: SocketStream, reader: BufferedByteReceiveStream) -> None:
        self.agent = agent
        self._stream = stream
        self._reader = reader
        self._ids = itertools.count(1)
        self._waiting: dict[int, Observation[dict[str, Any]]] = {}
        self._lock = anyio.Lock()
        self.report: dict[str, Any] | None = None
        self.closed = anyio.Event()

    async def state(self) -> dict[str, Any]:
        """The agent's counters: sent, received, offers made, accepted, conversations, ..."""
        result: dict[str, Any] = await self._call("state")
        return result

    async def instruct(self, text: str) -> None:
        """Hand the agent an owner instruction; its rules see it from sender ``owner``."""
        await self._call("instruct", text=text)

    async def stop(self) -> None:
        """Ask the agent to stop; it exits cleanly and its termination becomes ``Completed``."""
        await self._call("stop")

    async def _call(self, op: str, **fields: Any) -> Any:
        if self.closed.is_set():
            raise GatewayError(f"the gateway of {self.agent} is closed", reason="gateway-closed")
        request_id = next(self._ids)
        answer: Observation[dict[str, Any]] = Observation()
        self._waiting[request_id] = answer
        try:
            async with self._lock:
                await self._stream.send(_line({"id": request_id, "op": op, **fields}))
            with anyio.fail_after(30):
                reply = await _first(answer, self.closed)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, TimeoutError):
            raise GatewayError(
                f"the gateway of {self.agent} did not answer {op!r}", reason="gateway-lost"
            ) from None
        finally:
            self._waiting.pop(request_id, None)
        if reply is None:
            raise GatewayError(f"the gateway of {self.agent} closed", reason="gateway-closed")
        if not reply.get("ok"):
            raise GatewayError(str(reply.get("error")), reason="gateway-refused")
        return reply.get("result")

    async def _read(self) -> None:
        try:
            while True:
                frame = json.loads(await self._reader.receive_until(b"\n", _MAX_LINE))
                if frame.get("event") == "terminating":
                    self.report = frame
                elif (waiting := self._waiting.get(frame.get("id"))) is not None:
                    waiting.set(frame)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError):
            pass
        except (anyio.ClosedResourceError, anyio.DelimiterNotFound, ValueError):
            pass
        finally:
            self.closed.set()


@dataclass(frozen=True, eq=False, kw_only=True)
class ScriptedRuntime(RuntimeDescriptor):
    """A scripted agent: follows ``policy`` deterministically, seeded by run seed + agent name."""

    runtime: ClassVar[str] = "scripted"

    policy: ScriptedPolicy = field(default_factory=ScriptedPolicy)
    image: str = SCRIPTED_IMAGE
    command: tuple[str, ...] = SCRIPTED_COMMAND
    resources: Resources = SCRIPTED_RESOURCES
    ready_timeout_s: float = 60.0

    @asynccontextmanager
    async def attach(self, access: SandboxAccess) -> AsyncIterator[Attachment[ScriptedGateway]]:
        stream, reader = await _connect(access, self.ready_timeout_s)
        async with stream, anyio.create_task_group() as tasks:
            gateway = ScriptedGateway(access.agent, stream, reader)
            tasks.start_soon(gateway._read)
            await gateway._call("watch")
            await gateway.state()  # answers only once the program is fully up
            termination: Observation[Termination] = Observation()
            tasks.start_soon(_observe, access.exit, gateway, termination)
            try:
                yield Attachment(gateway=gateway, termination=termination)
            finally:
                tasks.cancel_scope.cancel()

    async def stop(self, gateway: Any) -> None:
        try:
            await gateway.stop()
        except GatewayError:
            pass


def scripted(
    policy: ScriptedPolicy | None = None,
    *,
    image: str = SCRIPTED_IMAGE,
    resources: Resources | None = None,
    environment: Mapping[str, str] | None = None,
    files: Mapping[str, bytes | str] | None = None,
    credentials: Mapping[str, SecretRef] | None = None,
    harvest: Harvest | None = None,
    ready_timeout_s: float = 60.0,
) -> ScriptedRuntime:
    """A scripted runtime following ``policy`` (default: silent); its policy file is harvested."""
    policy = policy or ScriptedPolicy()
    given = {path: c.encode() if isinstance(c, str) else c for path, c in (files or {}).items()}
    if POLICY_FILE in given:
        raise RuntimeDescriptorError(f"{POLICY_FILE} is written from the policy", reason="bad-path")
    body = json.dumps(policy.model_dump(mode="json"), indent=2, sort_keys=True).encode()
    return ScriptedRuntime(
        policy=policy,
        image=image,
        resources=resources or SCRIPTED_RESOURCES,
        environment=dict(environment or {}),
        files={POLICY_FILE: body, **given},
        credentials=dict(credentials or {}),
        harvest=harvest or Harvest(files=(POLICY_FILE,)),
        ready_timeout_s=ready_timeout_s,
    )


async def _connect(
    access: SandboxAccess, timeout_s: float
) -> tuple[SocketStream, BufferedByteReceiveStream]:
    """Connect and say hello, retrying until the agent listens, its process ends, or time is up."""
    delay = 0.01
    with anyio.move_on_after(timeout_s):
        while not access.exit.done:
            try:
                stream = await anyio.connect_tcp(access.bridge_host, access.bridge_port)
            except OSError:
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
            reader = BufferedByteReceiveStream(stream)
            try:
                await stream.send(_line({"op": "hello", "token": access.bridge_token}))
                hello = json.loads(await reader.receive_until(b"\n", _MAX_LINE))
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError, ValueError):
                await stream.aclose()
                await anyio.sleep(delay)
                continue
            if not hello.get("ok"):
                await stream.aclose()
                raise RuntimeDescriptorError(
                    f"the scripted gateway of {access.agent} refused the bridge token",
                    reason="bridge-refused",
                )
            return stream, reader
    if access.exit.done:
        raise RuntimeDescriptorError(
            f"agent {access.agent} exited before its gateway answered ({access.exit.peek()})",
            reason="exited-before-ready",
        )
    raise RuntimeDescriptorError(
        f"the scripted gateway of {access.agent} did not answer within {timeout_s:g} s",
        reason="bridge-timeout",
    )


async def _observe(
    exit: Observation[ProcessExit], gateway: ScriptedGateway, termination: Observation[Termination]
) -> None:
    ended = await exit
    with anyio.move_on_after(_REPORT_GRACE_S):  # the report precedes the exit on the socket
        await gateway.closed.wait()
    report = gateway.report or {}
    if report.get("outcome") == "completed" and ended.code == 0:
        termination.set(Completed())
    elif report.get("outcome") == "failed" and ended.signal is None:
        termination.set(Failed(str(report.get("detail") or "failed"), ended.code))
    else:
        termination.set(ended.plain())


async def _first(answer: Observation[dict[str, Any]], closed: anyio.Event) -> dict[str, Any] | None:
    result: list[dict[str, Any] | None] = []

    async def wait_answer(tasks: TaskGroup) -> None:
        result.append(await answer)
        tasks.cancel_scope.cancel()

    async def wait_closed(tasks: TaskGroup) -> None:
        await closed.wait()
        await anyio.lowlevel.checkpoint()  # let an answer read just before the close win
        result.append(answer.peek())
        tasks.cancel_scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait_answer, tasks)
        tasks.start_soon(wait_closed, tasks)
    return result[0]


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"
