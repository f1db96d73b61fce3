"""The controller's end of the module's channel against a peer that misbehaves at the socket.

Real Unix socket pairs: a peer that reads nothing cannot stall the controller's sends, and a peer
that announces a frame over the limit, or sends one that is not a JSON object, ends the channel
with a reason instead of being read.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from controller.program.wire import MAX_FRAME, Channel, ChannelClosed
from society_sandbox.framing import LENGTH


def test_a_peer_that_reads_nothing_ends_the_channel_instead_of_stalling_the_sender() -> None:
    here, there = socket.socketpair()
    try:
        channel = Channel(here, peer="module process", send_timeout_s=0.5)
        channel.start(lambda frame: None)
        started = time.monotonic()
        with pytest.raises(ChannelClosed):
            for _ in range(10_000):  # about 640 MiB: far over any socket buffer
                channel.send({"op": "result", "id": 1, "value": "x" * 65536})
        assert time.monotonic() - started < 10
        assert channel.closed.is_set()
    finally:
        there.close()
        here.close()


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (LENGTH.pack(MAX_FRAME + 1), "frame-too-large"),
        (LENGTH.pack(4) + b"oops", "frame-malformed"),
        (LENGTH.pack(2) + b"[]", "frame-malformed"),
    ],
)
def test_a_frame_over_the_limit_or_not_a_json_object_ends_the_channel(
    garbage: bytes, reason: str
) -> None:
    here, there = socket.socketpair()
    try:
        channel = Channel(here, peer="module process")
        requests: list[object] = []
        channel.start(requests.append)
        answered = threading.Event()
        outcome: list[BaseException] = []

        def ask() -> None:
            try:
                channel.request_sync({"op": "parameters"}, timeout_s=10)
            except BaseException as exc:
                outcome.append(exc)
            answered.set()

        threading.Thread(target=ask, daemon=True).start()
        there.sendall(garbage)
        assert answered.wait(10)
        assert isinstance(outcome[0], ChannelClosed) and outcome[0].reason == reason
        assert isinstance(channel.failure, ChannelClosed) and channel.failure.reason == reason
        assert requests == []
    finally:
        there.close()
        here.close()
