"""The module process's channel: length-prefixed JSON frames over one Unix socket, calls both ways.

Each side reads in a thread of its own, so a call can wait on the event loop (``request``) or
block the calling thread (``request_sync``: a property, ``ctx.fork.reached()``), and a peer that
stops reading never stalls the loop's reads. A frame (``society_sandbox.framing``) holds a UTF-8
JSON object; ``op`` names what it is: ``result`` and ``error`` answer the call whose ``id`` they
carry, anything else is a request for the side's ``on_request``.

The controller's end treats every frame as hostile data: one over ``MAX_FRAME``, or one that is
not a JSON object, ends the channel (``ChannelClosed``), and nothing in a frame is evaluated.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from controller.errors import SocietyError
from society_sandbox.framing import FrameError, framed, read_frame

T = TypeVar("T")
MAX_FRAME = 16 * 1024 * 1024
MAX_HELD_BYTES = 32 * 1024 * 1024
"""The controller's end: the request frames it holds at once (queued or being answered), in
bytes as they arrived. A request past it is refused at once (``calls-over-budget``) and not kept,
so a module's waiting calls hold at most this much of the controller's memory."""
MAX_NOTICE_BYTES = 64 * 1024
"""With a byte budget: a request without an id (``cancel``) past the peer's first frame (the
module's spec) is dropped unread when it is larger; nothing answers it, so nothing would free it."""
Frame = dict[str, Any]


class ChannelClosed(SocietyError):
    """The module process or its channel is gone (or sent what no channel carries)."""

    reason = "module-process-lost"


class CallsOverBudget(SocietyError):
    """A call would hold more of the controller's memory than the channel's byte budget."""

    reason = "calls-over-budget"


class _Waiter:
    __slots__ = ("_deliver",)

    def __init__(self, deliver: Callable[[Frame | BaseException], None]) -> None:
        self._deliver = deliver

    def resolve(self, outcome: Frame | BaseException) -> None:
        self._deliver(outcome)


class Channel:
    """One end of the channel. ``start(on_request)`` once; ``on_request`` runs in the reader
    thread, so it must hand work off (to the loop) rather than do it."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        peer: str,
        send_timeout_s: float | None = None,
        held_bytes_max: int | None = None,
    ) -> None:
        """``send_timeout_s``: a peer that reads nothing for that long ends the channel (the
        controller's end, so that a module process cannot stall the controller's loop).
        ``held_bytes_max``: the peer's requests held unanswered at once, in frame bytes (the
        controller's end: ``MAX_HELD_BYTES``); one past it is answered with a refusal at once."""
        if send_timeout_s is not None:
            seconds = int(send_timeout_s)
            micros = int((send_timeout_s - seconds) * 1_000_000)
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", seconds, micros)
            )
        self._sock = sock
        self._peer = peer
        self._send_lock = threading.Lock()
        self._state = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Waiter] = {}
        self._failure: BaseException | None = None
        self._reader: threading.Thread | None = None
        self._on_end: Callable[[], None] | None = None
        self._held_max = held_bytes_max
        self._held: dict[int, int] = {}
        self._requests_seen = 0
        self.held_bytes = 0
        """The bytes of the peer's requests held unanswered now (with ``held_bytes_max``)."""
        self.closed = threading.Event()

    @property
    def failure(self) -> BaseException | None:
        """Why the channel ended, once it has."""
        return self._failure

    def start(
        self, on_request: Callable[[Frame], None], on_end: Callable[[], None] | None = None
    ) -> None:
        """Read in a thread of its own; ``on_end`` runs (in whichever thread ends the channel)
        once it has ended."""
        self._on_end = on_end
        self._reader = threading.Thread(
            target=self._read, args=(on_request,), name=f"society-{self._peer}-channel", daemon=True
        )
        self._reader.start()

    def send(self, frame: Frame) -> None:
        """Write one frame (any thread); ``ChannelClosed`` once the channel ended."""
        try:
            data = framed(
                json.dumps(frame, separators=(",", ":"), allow_nan=False).encode("utf-8"),
                limit=MAX_FRAME,
            )
        except FrameError as exc:
            raise ChannelClosed(exc.detail, reason=exc.reason) from None
        with self._send_lock:
            if self._failure is not None:
                raise self._closed_error()
            try:
                self._sock.sendall(data)
            except OSError as exc:
                self._end(ChannelClosed(f"the {self._peer} is gone ({exc})"))
                raise self._closed_error() from None

    def reply(self, call_id: object, *, value: Any = None, error: Any = None) -> None:
        """Answer request ``call_id`` (ignored once the channel ended)."""
        frame: Frame = {"op": "error", "id": call_id, "error": error}
        if error is None:
            frame = {"op": "result", "id": call_id, "value": value}
        with contextlib.suppress(ChannelClosed):
            self.send(frame)
        if self._held_max is not None and type(call_id) is int:
            with self._state:
                self.held_bytes -= self._held.pop(call_id, 0)

    def request_sync(self, frame: Frame, *, timeout_s: float | None = None) -> Frame:
        """Send a request and block this thread until its answer frame."""
        done = threading.Event()
        box: list[Frame | BaseException] = []

        def deliver(outcome: Frame | BaseException) -> None:
            box.append(outcome)
            done.set()

        call_id = self._register(deliver)
        try:
            self.send({**frame, "id": call_id})
            if not done.wait(timeout_s):
                raise ChannelClosed(
                    f"the {self._peer} did not answer {frame.get('op')!r} within {timeout_s:g} s",
                    reason="module-process-unresponsive",
                )
        finally:
            with self._state:
                self._pending.pop(call_id, None)
        outcome = box[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def request(self, frame: Frame) -> Frame:
        """Send a request and wait (on the running loop) for its answer frame; a cancelled wait
        tells the peer (``cancel``) and re-raises."""
        call_id, future = self.submit(frame)
        try:
            outcome = await future
        except asyncio.CancelledError:
            self.cancel(call_id)
            raise
        finally:
            with self._state:
                self._pending.pop(call_id, None)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def submit(self, frame: Frame) -> tuple[int, asyncio.Future[Frame | BaseException]]:
        """Send a request; its answer (or the channel's end) settles the returned future on the
        running loop, whoever waits for it (``cancel`` tells the peer to stop the call)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Frame | BaseException] = loop.create_future()

        def deliver(outcome: Frame | BaseException) -> None:
            loop.call_soon_threadsafe(settle, future, outcome)

        call_id = self._register(deliver)
        try:
            self.send({**frame, "id": call_id})
        except BaseException:
            with self._state:
                self._pending.pop(call_id, None)
            raise
        return call_id, future

    def cancel(self, call_id: int) -> None:
        """Ask the peer to stop call ``call_id`` (its answer still comes)."""
        with contextlib.suppress(ChannelClosed):
            self.send({"op": "cancel", "target": call_id})

    def close(self) -> None:
        """End the channel (idempotent): pending calls fail, the reader thread ends."""
        self._end(ChannelClosed(f"the channel to the {self._peer} was closed"))
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    # ---- internals -------------------------------------------------------------------------

    def _register(self, deliver: Callable[[Frame | BaseException], None]) -> int:
        with self._state:
            if self._failure is not None:
                raise self._closed_error()
            call_id = next(self._ids)
            self._pending[call_id] = _Waiter(deliver)
        return call_id

    def _read(self, on_request: Callable[[Frame], None]) -> None:
        reason = ChannelClosed(f"the {self._peer} closed its channel")
        try:
            while True:
                frame = self._receive()
                if frame is None:
                    break
                op = frame.get("op")
                if op in ("result", "error"):
                    call_id = frame.get("id")
                    with self._state:
                        waiter = self._pending.pop(call_id, None) if type(call_id) is int else None
                    if waiter is not None:
                        waiter.resolve(frame)
                elif self._admit(frame):
                    on_request(frame)
        except ChannelClosed as error:
            reason = error
        except OSError as exc:
            reason = ChannelClosed(f"reading from the {self._peer} failed ({exc})")
        finally:
            self._end(reason)

    def _admit(self, frame: Frame) -> bool:
        """Hold a request within the byte budget, or refuse it at once (and keep nothing)."""
        call_id = frame.get("id")
        if self._held_max is None:
            return True
        size = self._frame_bytes
        self._requests_seen += 1
        if type(call_id) is not int:  # a notice: the spec first, then only small ones
            return self._requests_seen == 1 or size <= MAX_NOTICE_BYTES
        with self._state:
            duplicate = call_id in self._held
            if not duplicate and self.held_bytes + size <= self._held_max:
                self._held[call_id] = size
                self.held_bytes += size
                return True
            held = self.held_bytes
        refused = CallsOverBudget(
            f"call {call_id} is refused: the program's calls waiting on the controller hold "
            f"{held:,} bytes, and this {size:,}-byte one would pass the {self._held_max:,}-byte "
            "budget" + (" (its id is already in use)" if duplicate else ""),
            next_step="send large data in parts, or wait for earlier calls to return",
        )
        with contextlib.suppress(ChannelClosed):
            self.send({"op": "error", "id": call_id, "error": error_frame(refused)})
        return False

    def _receive(self) -> Frame | None:
        try:
            body = read_frame(self._sock.recv, limit=MAX_FRAME)
        except FrameError as exc:
            reason = exc.reason if exc.reason == "frame-too-large" else None
            raise ChannelClosed(f"from the {self._peer}: {exc.detail}", reason=reason) from None
        if body is None:
            return None
        self._frame_bytes = len(body)
        try:
            frame = json.loads(body)
        except (ValueError, RecursionError):
            raise ChannelClosed(
                f"the {self._peer} sent a frame that is not JSON", reason="frame-malformed"
            ) from None
        if not isinstance(frame, dict):
            raise ChannelClosed(
                f"the {self._peer} sent a frame that is not a JSON object", reason="frame-malformed"
            )
        return frame

    def _end(self, reason: BaseException) -> None:
        with self._state:
            if self._failure is not None:
                return
            self._failure = reason
            waiting = list(self._pending.values())
            self._pending.clear()
        self.closed.set()
        for waiter in waiting:
            waiter.resolve(self._closed_error())
        if self._on_end is not None:
            self._on_end()

    def _closed_error(self) -> ChannelClosed:
        failure = self._failure
        if isinstance(failure, ChannelClosed):
            return ChannelClosed(failure.detail, reason=failure.reason)
        return ChannelClosed(f"the channel to the {self._peer} ended")


def settle(future: asyncio.Future[T], outcome: T) -> None:
    """Complete ``future`` unless it already is (a second answer is ignored)."""
    if not future.done():
        future.set_result(outcome)


def error_frame(exc: BaseException) -> dict[str, Any]:
    """An exception as data: its class, message, and a ``SocietyError``'s reason and next step."""
    cls = type(exc)
    detail = getattr(exc, "detail", None)
    return {
        "module": cls.__module__,
        "type": cls.__qualname__,
        "message": detail if isinstance(detail, str) else str(exc),
        "reason": _text(getattr(exc, "reason", None)),
        "next_step": _text(getattr(exc, "next_step", None)),
    }


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class Inbox:
    """Frames a channel's reader thread posts, delivered in order on the loop that made it."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._send, self.frames = anyio.create_memory_object_stream[Frame](math.inf)

    def post(self, frame: Frame) -> None:
        """From any thread: queue ``frame`` (dropped once the inbox is closed)."""
        self._loop.call_soon_threadsafe(self._offer, frame)

    def close(self) -> None:
        self._send.close()

    def _offer(self, frame: Frame) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait(frame)
