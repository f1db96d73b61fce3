"""Length-prefixed frames: how every process channel of the project delimits what it carries.

A frame is its payload's length, 4 bytes big-endian, then the payload. Big-endian (network order,
``ORDER``) is the byte order of every number a process channel carries. A reader names the
largest payload it takes and refuses a larger one by its announced length, before reading it.

It imports only the error root and the standard library: the ledger's child processes, started
with ``python -I -S``, load it from beside the ledger and nothing else of the project.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from society_sandbox.errors import SocietyError

ORDER = ">"
"""Big-endian (network order), as ``struct`` spells it."""
LENGTH = struct.Struct(ORDER + "I")
"""A frame's header: its payload's length."""
MAX_PAYLOAD = 2**32 - 1
"""The longest payload ``LENGTH`` can announce."""
READ_CHUNK = 1 << 20

Read = Callable[[int], bytes]
"""Up to ``n`` bytes of a stream, ``b""`` at its end: a socket's ``recv``, a file's ``read``."""


class FrameError(SocietyError):
    """A frame the reader does not take: over its limit (``frame-too-large``), or cut off by the
    end of the stream (``frame-cut``)."""

    reason = "frame-cut"


def framed(payload: bytes, *, limit: int = MAX_PAYLOAD) -> bytes:
    """``payload`` as one frame; ``FrameError`` (``frame-too-large``) when it is over ``limit``."""
    if len(payload) > limit:
        raise FrameError(
            f"a frame of {len(payload)} bytes is over the {limit}-byte limit",
            reason="frame-too-large",
        )
    return LENGTH.pack(len(payload)) + payload


def read_frame(read: Read, *, limit: int) -> bytes | None:
    """The next frame's payload, or ``None`` when the stream ends where a frame would begin.

    ``FrameError``: ``frame-too-large`` when the announced length is over ``limit`` (none of the
    payload is read), ``frame-cut`` when the stream ends inside the frame.
    """
    head = read_exactly(read, LENGTH.size)
    if head is None:
        return None
    (size,) = LENGTH.unpack(head)
    if size > limit:
        raise FrameError(
            f"a frame of {size} bytes was announced, over the {limit}-byte limit",
            reason="frame-too-large",
        )
    payload = read_exactly(read, size)
    if payload is None:
        raise FrameError("the stream ended inside a frame")
    return payload


def read_exactly(read: Read, size: int) -> bytes | None:
    """``size`` bytes, or ``None`` when the stream ends before the first of them; ``FrameError``
    (``frame-cut``) when it ends after some."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = read(min(size - len(chunks), READ_CHUNK))
        if not chunk:
            if not chunks:
                return None
            raise FrameError("the stream ended inside a frame")
        chunks += chunk
    return bytes(chunks)


def frame_at(data: bytes, offset: int = 0) -> tuple[bytes, int] | None:
    """The payload of the frame at ``offset`` in ``data`` and the offset after it, or ``None``
    while ``data`` holds only part of that frame (a reader that buffers what has arrived)."""
    start = offset + LENGTH.size
    if len(data) < start:
        return None
    (size,) = LENGTH.unpack_from(data, offset)
    if len(data) < start + size:
        return None
    return data[start : start + size], start + size
