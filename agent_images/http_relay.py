"""The HTTP/1.1 framing of the in-sandbox model relay (``model_relay``): one request read from a
loopback client (bounded head and body, no chunked bodies), one answer written, then the
connection closes."""

from __future__ import annotations

from dataclasses import dataclass

from anyio.streams.buffered import BufferedByteReceiveStream

MAX_HEAD = 64 * 1024
MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes


async def read_request(reader: BufferedByteReceiveStream) -> Request | None:
    """The next request; ``None`` when its body is chunked or over ``MAX_BODY`` (answer 413)."""
    head = (await reader.receive_until(b"\r\n\r\n", MAX_HEAD)).decode("latin-1")
    request_line, *header_lines = head.split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers.get("content-length") or 0)
    if length > MAX_BODY or "chunked" in headers.get("transfer-encoding", ""):
        return None
    body = await reader.receive_exactly(length) if length else b""
    return Request(method, target, headers, body)


def response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
        f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body
