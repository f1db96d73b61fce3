"""Length-prefixed frames, as every process channel carries them: the length big-endian, a reader's
limit checked on the announced length, and a stream's end told apart from a frame cut short."""

from __future__ import annotations

import io
import socket
import threading

import pytest

from society_sandbox.framing import FrameError, frame_at, framed, read_frame


def test_a_frame_is_its_length_in_network_order_then_its_payload() -> None:
    assert framed(b"hello") == b"\x00\x00\x00\x05hello"
    assert framed(b"") == b"\x00\x00\x00\x00"


def test_frames_written_to_a_socket_are_read_back_in_order_then_the_end_is_none() -> None:
    here, there = socket.socketpair()

    def write() -> None:
        here.sendall(framed(b"one") + framed(b"") + framed(b"x" * 300_000))
        here.shutdown(socket.SHUT_WR)

    with here, there:
        writer = threading.Thread(target=write)
        writer.start()
        frames = [read_frame(there.recv, limit=1 << 20) for _ in range(4)]
        writer.join()
    assert frames == [b"one", b"", b"x" * 300_000, None]


def test_a_frame_over_the_readers_limit_is_refused_before_its_payload_is_read() -> None:
    stream = io.BytesIO(framed(b"x" * 100) + framed(b"next"))
    with pytest.raises(FrameError) as refused:
        read_frame(stream.read, limit=99)
    assert refused.value.reason == "frame-too-large"
    assert stream.tell() == 4


def test_a_stream_that_ends_inside_a_frame_is_a_cut_frame() -> None:
    for cut in (b"\x00\x00", framed(b"payload")[:-1]):
        with pytest.raises(FrameError) as ended:
            read_frame(io.BytesIO(cut).read, limit=1024)
        assert ended.value.reason == "frame-cut"


def test_a_payload_over_the_writers_limit_is_not_framed() -> None:
    with pytest.raises(FrameError) as refused:
        framed(b"x" * 11, limit=10)
    assert refused.value.reason == "frame-too-large"


def test_a_buffered_reader_finds_a_frame_only_once_all_of_it_has_arrived() -> None:
    data = b"ab" + framed(b"payload") + b"rest"
    for end in range(2, 2 + 4 + len(b"payload")):
        assert frame_at(data[:end], 2) is None
    assert frame_at(data, 2) == (b"payload", 2 + 4 + 7)
