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


def test_calls_past_the_byte_budget_are_refused_at_once_and_not_kept() -> None:
    """The module fires calls with 1 MiB arguments that the controller does not answer yet:
    those that fit the budget are handed on, the rest refused at once (typed, with the call's id)
    and never held; an answer frees its share of the budget for the next call."""
    here, there = socket.socketpair()
    budget = 4 * 1024 * 1024
    try:
        controller = Channel(here, peer="module process", held_bytes_max=budget)
        handed: list[dict[str, object]] = []
        controller.start(handed.append)
        module = Channel(there, peer="controller")
        module.start(lambda frame: None)
        big = "x" * (1024 * 1024)
        outcomes: dict[int, object] = {}
        threads = []

        def call(number: int) -> None:
            try:
                outcomes[number] = module.request_sync({"op": "call", "arg": big}, timeout_s=30)
            except BaseException as exc:
                outcomes[number] = exc

        for number in range(10):
            threads.append(threading.Thread(target=call, args=(number,)))
            threads[-1].start()
        deadline = time.monotonic() + 20
        while len(handed) + len(outcomes) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(handed) == 3  # three 1 MiB frames (and their JSON) fit in 4 MiB; a fourth not
        assert controller.held_bytes <= budget
        refused = [o for o in outcomes.values() if isinstance(o, dict)]
        assert len(refused) == 7
        for answer in refused:
            assert answer["op"] == "error"
            error = answer["error"]
            assert isinstance(error, dict) and error["reason"] == "calls-over-budget"
            assert error["type"] == "CallsOverBudget"
            assert "4,194,304-byte budget" in error["message"]

        first = handed[0]
        controller.reply(first["id"], value="done")  # an answer frees its share
        assert controller.held_bytes < budget - 1024 * 1024
        threads.append(threading.Thread(target=call, args=(10,)))
        threads[-1].start()
        while len(handed) < 4 and 10 not in outcomes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(handed) == 4, outcomes.get(10)  # handed on, not refused
        for frame in handed[1:]:
            controller.reply(frame["id"], value="done")
        for thread in threads:
            thread.join(timeout=30)
        assert outcomes[10] == {"op": "result", "id": handed[3]["id"], "value": "done"}
        assert controller.held_bytes == 0
    finally:
        there.close()
        here.close()


def test_a_flood_of_large_frames_without_an_id_is_dropped_unread_after_the_first() -> None:
    here, there = socket.socketpair()
    try:
        controller = Channel(here, peer="module process", held_bytes_max=4 * 1024 * 1024)
        handed: list[dict[str, object]] = []
        controller.start(handed.append)
        module = Channel(there, peer="controller")
        module.start(lambda frame: None)
        module.send({"op": "spec", "spec": "s" * 200_000})  # the first frame: the module's spec
        for _ in range(20):
            module.send({"op": "cancel", "target": 1, "junk": "x" * 1_000_000})
        module.send({"op": "cancel", "target": 2})
        deadline = time.monotonic() + 10
        while not any(frame.get("target") == 2 for frame in handed):
            assert time.monotonic() < deadline, handed
            time.sleep(0.01)
        assert [frame["op"] for frame in handed] == ["spec", "cancel"]
    finally:
        there.close()
        here.close()
