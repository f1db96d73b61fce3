"""A small HTTP/1.1 server on anyio and h11: one request, one buffered JSON answer, keep-alive.

The gateway needs two routes on loopback, so this stays far below a web framework: h11 does the
protocol, anyio owns the sockets and the per-connection tasks, and the caller's scope owns both.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

import anyio
import h11
from anyio.abc import SocketStream

_log = logging.getLogger("controller.modelgateway.http")

MAX_BODY_BYTES = 4 * 1024 * 1024
REQUEST_TIMEOUT_S = 30.0
"""How long one request (head and body) may take to arrive, idle keep-alive wait included."""
_RECEIVE_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpHead:
    """A request line and headers, before any of the body is read."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Sequence[tuple[str, str]] = field(default_factory=tuple)

    @classmethod
    def json(
        cls, status: int, payload: Any, headers: Sequence[tuple[str, str]] = ()
    ) -> HttpResponse:
        return cls(status, json.dumps(payload).encode(), headers=tuple(headers))


class BodyAllowance(Protocol):
    """What one admitted request's body may take of the server's memory, reserved before read."""

    def take(self, nbytes: int) -> HttpResponse | None:
        """Reserve ``nbytes`` more, or the response that refuses the request (then closes)."""
        ...

    def release(self) -> None:
        """The body is no longer held."""
        ...


HttpHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]
HttpAdmission = Callable[[HttpHead], HttpResponse | BodyAllowance | None]
"""Looks at a request's head; a response refuses it before its body is read (then closes), an
allowance admits it with its body's bytes reserved there as they are read."""


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def serve_connection(
    stream: SocketStream,
    handler: HttpHandler,
    *,
    admit: HttpAdmission | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> None:
    """Answer requests on one connection until the peer closes it or the protocol says close.

    ``admit`` sees each request's head first; a body is read only for an admitted request, up to
    ``MAX_BODY_BYTES``, and the whole request must arrive within ``timeout_s``.
    """
    connection = h11.Connection(h11.SERVER)
    held: list[BodyAllowance] = []
    async with stream:
        while True:
            try:
                go_on = await _answer_one(connection, stream, handler, admit, timeout_s, held)
            finally:
                while held:  # the body's bytes are no longer held, however the cycle ended
                    held.pop().release()
            if not go_on:
                return
            connection.start_next_cycle()


async def _answer_one(
    connection: h11.Connection,
    stream: SocketStream,
    handler: HttpHandler,
    admit: HttpAdmission | None,
    timeout_s: float,
    held: list[BodyAllowance],
) -> bool:
    """Read, answer and send one request; whether the connection carries another."""
    try:
        with anyio.fail_after(timeout_s):
            request = await _read_request(connection, stream, admit, held)
    except _Refused as refused:
        await _try_send(connection, stream, refused.response)
        return False
    except _BadRequest as exc:
        await _try_send_error(connection, stream, exc.status, str(exc))
        return False
    except TimeoutError:
        if connection.their_state is h11.SEND_BODY:  # a started request, never finished
            await _try_send_error(connection, stream, 408, "the request took too long")
        return False
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False
    if request is None:
        return False
    try:
        response = await handler(request)
    except Exception:
        _log.exception("handler failed for %s %s", request.method, request.path)
        response = _error_response(500, "internal gateway error")
    try:
        await _send_response(connection, stream, response)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, h11.ProtocolError):
        return False
    return connection.our_state is h11.DONE and connection.their_state is h11.DONE


class _Refused(Exception):
    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status)
        self.response = response


async def _read_request(
    connection: h11.Connection,
    stream: SocketStream,
    admit: HttpAdmission | None,
    held: list[BodyAllowance],
) -> HttpRequest | None:
    head: HttpHead | None = None
    body = bytearray()
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            raise _BadRequest(exc.error_status_hint, f"malformed HTTP request: {exc}") from None
        if event is h11.NEED_DATA:
            if connection.they_are_waiting_for_100_continue and head is not None:
                await stream.send(
                    _serialize(connection, h11.InformationalResponse(status_code=100, headers=[]))
                )
            try:
                data = await stream.receive(_RECEIVE_CHUNK)
            except anyio.EndOfStream:
                data = b""
            connection.receive_data(data)
        elif isinstance(event, h11.Request):
            head = HttpHead(
                event.method.decode(),
                event.target.decode("latin-1").split("?", 1)[0],
                {name.decode().lower(): value.decode("latin-1") for name, value in event.headers},
            )
            admitted = admit(head) if admit is not None else None
            if isinstance(admitted, HttpResponse):
                raise _Refused(admitted)
            declared = head.headers.get("content-length", "0")
            if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
                raise _BadRequest(413, f"request body exceeds {MAX_BODY_BYTES} bytes")
            if admitted is not None:
                held.append(admitted)
                _reserve(admitted, _most_body_bytes(head.headers))
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise _BadRequest(413, f"request body exceeds {MAX_BODY_BYTES} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return HttpRequest(head.method, head.path, head.headers, bytes(body))
        else:  # ConnectionClosed or PAUSED at the end of a cycle
            return None


async def refuse_unread(stream: SocketStream, response: HttpResponse) -> None:
    """Answer ``response`` on a connection none of whose bytes is read, then close it."""
    head = f"HTTP/1.1 {response.status} {_reason(response).decode()}\r\n".encode()
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        ("connection", "close"),
        *response.headers,
    ]
    head += b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)
    async with stream:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.send(head + b"\r\n" + response.body)


def _most_body_bytes(headers: Mapping[str, str]) -> int:
    """The most body a head lets follow: h11 holds a body to its declared length (none: empty)."""
    if "transfer-encoding" in headers:  # chunked: any length, up to the limit
        return MAX_BODY_BYTES
    declared = headers.get("content-length", "0")
    return min(int(declared), MAX_BODY_BYTES) if declared.isdigit() else MAX_BODY_BYTES


def _reserve(allowance: BodyAllowance, nbytes: int) -> None:
    refusal = allowance.take(nbytes)
    if refusal is not None:
        raise _Refused(refusal)


async def _send_response(
    connection: h11.Connection, stream: SocketStream, response: HttpResponse
) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers,
    ]
    await stream.send(
        _serialize(
            connection,
            h11.Response(status_code=response.status, headers=headers, reason=_reason(response)),
        )
        + _serialize(connection, h11.Data(data=response.body))
        + _serialize(connection, h11.EndOfMessage())
    )


async def _try_send_error(
    connection: h11.Connection, stream: SocketStream, status: int, message: str
) -> None:
    await _try_send(connection, stream, _error_response(status, message))


async def _try_send(
    connection: h11.Connection, stream: SocketStream, response: HttpResponse
) -> None:
    try:
        await _send_response(connection, stream, response)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, h11.ProtocolError):
        pass


def _reason(response: HttpResponse) -> bytes:
    try:
        return HTTPStatus(response.status).phrase.encode()
    except ValueError:
        return b""


def _serialize(connection: h11.Connection, event: Any) -> bytes:
    data = connection.send(event)
    return data if data is not None else b""


def _error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse.json(
        status, {"error": {"message": message, "type": "gateway_error", "code": None}}
    )
