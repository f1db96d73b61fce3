"""The owner-API bridge the shipped runtimes speak: newline-delimited JSON on the bridge port.

The agent program serves it (``society_sandbox/owner_api.py``); the controller side connects with
the per-run bridge token, calls ``watch`` so the program reports how it ends, and turns that
report plus the process exit into the agent's ``Termination``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import ByteStream, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from controller.agents.runtime import Attachment, RuntimeDescriptorError, SandboxAccess
from controller.agents.termination import (
    Completed,
    Failed,
    Observation,
    ProcessExit,
    Termination,
)
from controller.errors import SocietyError
from controller.network.unix import connect_unix
from society_sandbox.owner_api import MAX_LINE as PROGRAM_MAX_LINE
from society_sandbox.owner_api import MalformedLine, decode_line, receive_line

MAX_LINE = 1024 * 1024
REQUEST_MAX_BYTES = PROGRAM_MAX_LINE
"""The longest request line the programs' owner API reads (``society_sandbox.owner_api``)."""
REPORT_GRACE_S = 1.0
"""How long to wait for the program's own report once its process ended."""
PROGRAM_REASON = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
"""The shape of the reason a program gives for refusing ``state`` before it is ready (it cannot
start: ``program-cannot-start``, with its reason and words); any other refusal is
``bridge-failed``."""
MAX_PROGRAM_DETAIL = 4000

OwnerT = TypeVar("OwnerT", bound="BridgeOwner")


class OwnerError(SocietyError):
    """An owner handle's request was refused, or its bridge went away; ``reason`` is
    machine-readable, and ``refusal`` is the program's own reason for a refusal
    (``owner-refused``)."""

    reason = "owner-failed"

    def __init__(
        self,
        detail: str,
        *,
        reason: str | None = None,
        next_step: str | None = None,
        refusal: str | None = None,
    ) -> None:
        super().__init__(detail, reason=reason, next_step=next_step)
        self.refusal = refusal


class BridgeOwner:
    """A connected owner API: request/answer calls plus the program's final report."""

    def __init__(self, agent: str, stream: ByteStream, reader: BufferedByteReceiveStream) -> None:
        self.agent = agent
        self._stream = stream
        self._reader = reader
        self._ids = itertools.count(1)
        self._waiting: dict[int, Observation[dict[str, Any]]] = {}
        self._lock = anyio.Lock()
        self.report: dict[str, Any] | None = None
        self.closed = anyio.Event()

    async def state(self) -> dict[str, Any]:
        """The program's own account of itself (what it sent, received, decided, spent)."""
        result: dict[str, Any] = await self._call("state")
        return result

    async def _call(self, op: str, **fields: Any) -> Any:
        if self.closed.is_set():
            raise OwnerError(f"the bridge of {self.agent} is closed", reason="owner-closed")
        request_id = next(self._ids)
        line = _line({"id": request_id, "op": op, **fields})
        if len(line) > REQUEST_MAX_BYTES:  # the program would close its bridge on it
            raise OwnerError(
                f"{op!r} to {self.agent} is {len(line):,} bytes; an owner request holds at most "
                f"{REQUEST_MAX_BYTES:,}",
                reason="owner-request-too-large",
                next_step="send a shorter text, or put the rest in the agent's files",
            )
        answer: Observation[dict[str, Any]] = Observation()
        self._waiting[request_id] = answer
        try:
            async with self._lock:
                await self._stream.send(line)
            with anyio.fail_after(30):
                reply = await _first(answer, self.closed)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, TimeoutError):
            raise OwnerError(
                f"the bridge of {self.agent} did not answer {op!r}", reason="owner-lost"
            ) from None
        finally:
            self._waiting.pop(request_id, None)
        if reply is None:
            raise OwnerError(f"the bridge of {self.agent} closed", reason="owner-closed")
        if not reply.get("ok"):
            refusal = reply.get("reason") if reply.get("ok") is False else None
            raise OwnerError(
                str(reply.get("error")),
                reason="owner-refused",
                refusal=refusal if isinstance(refusal, str) else None,
            )
        return reply.get("result")

    async def _read(self) -> None:
        """Read answers and the final report; a malformed frame closes this bridge, no more."""
        try:
            while True:
                frame = decode_line(await receive_line(self._reader, MAX_LINE))
                request_id = frame.get("id")
                if frame.get("event") == "terminating":
                    self.report = frame
                elif type(request_id) is int and (waiting := self._waiting.get(request_id)):
                    waiting.set(frame)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError):
            pass
        except (anyio.ClosedResourceError, anyio.DelimiterNotFound, MalformedLine):
            pass
        finally:
            self.closed.set()


@asynccontextmanager
async def attach_bridge(
    access: SandboxAccess,
    owner_class: type[OwnerT],
    *,
    runtime: str,
    timeout_s: float,
    on_ready: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    on_report: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None,
) -> AsyncIterator[Attachment[OwnerT]]:
    """Connect, wait until the program is fully up, and observe how it ends.

    ``on_ready`` gets the program's first state; ``on_report`` its final report, if it sent one.
    """
    stream, reader = await _connect(access, timeout_s, runtime)
    failure: OwnerError | None = None
    async with stream, anyio.create_task_group() as tasks:
        owner = owner_class(access.agent, stream, reader)
        tasks.start_soon(owner._read)
        try:
            await owner._call("watch")
            state = await owner.state()  # answers only once the program is fully up
        except OwnerError as exc:
            failure = exc
            tasks.cancel_scope.cancel()
        else:
            if on_ready is not None:
                await on_ready(state)
            termination: Observation[Termination] = Observation()
            tasks.start_soon(_observe, access.exit, owner, termination, on_report)
            try:
                yield Attachment(owner=owner, termination=termination)
            finally:
                tasks.cancel_scope.cancel()
    if failure is not None:  # raised here, outside the task group, as one typed error
        if failure.refusal is not None and PROGRAM_REASON.match(failure.refusal):
            # the program itself says why it cannot start (e.g. a peer whose policy cannot load)
            raise RuntimeDescriptorError(
                f"the {runtime} program of {access.agent} cannot start ({failure.refusal}): "
                f"{str(failure)[:MAX_PROGRAM_DETAIL]}",
                reason="program-cannot-start",
            )
        raise RuntimeDescriptorError(
            f"the {runtime} bridge of {access.agent} failed before it was ready ({failure}); "
            f"its output.log may say why",
            reason="bridge-failed",
        )


def termination_of(report: Mapping[str, Any], ended: ProcessExit) -> Termination:
    """The program's own report decides between Completed and Failed; otherwise the exit does."""
    if report.get("outcome") == "completed" and ended.code == 0:
        return Completed()
    if report.get("outcome") == "failed" and ended.signal is None:
        return Failed(str(report.get("detail") or "failed"), ended.code)
    return ended.plain()


async def _observe(
    exit: Observation[ProcessExit],
    owner: BridgeOwner,
    termination: Observation[Termination],
    on_report: Callable[[Mapping[str, Any]], Awaitable[None]] | None,
) -> None:
    ended = await exit
    with anyio.move_on_after(REPORT_GRACE_S):  # the report precedes the exit on the socket
        await owner.closed.wait()
    report = owner.report or {}
    if report and on_report is not None:
        with anyio.CancelScope(shield=True):
            await on_report(report)
    termination.set(termination_of(report, ended))


async def _connect(
    access: SandboxAccess, timeout_s: float, runtime: str
) -> tuple[ByteStream, BufferedByteReceiveStream]:
    """Connect and say hello, retrying until the agent listens, its process ends, or time is up."""
    delay = 0.01
    with anyio.move_on_after(timeout_s):
        while not access.exit.done:
            try:
                stream: ByteStream = await (
                    connect_unix(access.bridge_path)
                    if access.bridge_path is not None
                    else anyio.connect_tcp(access.bridge_host, access.bridge_port)
                )
            except OSError:
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
            reader = BufferedByteReceiveStream(stream)
            try:
                await stream.send(_line({"op": "hello", "token": access.bridge_token}))
                hello = decode_line(await receive_line(reader, MAX_LINE))
            except (MalformedLine, anyio.DelimiterNotFound) as exc:
                await stream.aclose()
                raise RuntimeDescriptorError(
                    f"the {runtime} bridge of {access.agent} answered the hello with a "
                    f"malformed line ({exc or 'too long'}); its output.log may say why",
                    reason="bridge-malformed",
                ) from None
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError):
                # closed before it answered: not listening yet, or it gave up on a late hello
                await stream.aclose()
                await anyio.sleep(delay)
                continue
            if hello.get("ok") is not True:
                await stream.aclose()
                raise RuntimeDescriptorError(
                    f"the {runtime} bridge of {access.agent} refused the bridge token",
                    reason="bridge-refused",
                )
            return stream, reader
    if access.exit.done:
        raise RuntimeDescriptorError(
            f"agent {access.agent} exited before its owner answered ({access.exit.peek()}); "
            f"its output.log says why",
            reason="exited-before-ready",
        )
    raise RuntimeDescriptorError(
        f"the {runtime} bridge of {access.agent} did not answer within {timeout_s:g} s",
        reason="bridge-timeout",
    )


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
