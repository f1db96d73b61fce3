"""Wire protocol v1: the schema, the limits, and fuzzing a live router with bad frames."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from network_support import make_ledger
from pydantic import ValidationError
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from controller.network import AgentSession, connect_agent
from controller.network.router import Router, RouterCredential
from society_sandbox.network.errors import CLOSE_CODES, ERROR_CODES
from society_sandbox.network.protocol import (
    MAX_FRAME_BYTES,
    MAX_PART_BYTES,
    Delivery,
    DeliveryAck,
    DeliveryFrame,
    Participant,
    SendAck,
    SendAckFrame,
    SendMessage,
    encode,
    encode_ack,
    encode_delivery,
    encode_delivery_ack,
    parse_client_frame,
    protocol_json_schema,
)

FRAME_TYPES = {
    "authenticate",
    "open",
    "send",
    "delivery-ack",
    "heartbeat",
    "authenticated",
    "opened",
    "ack",
    "delivery",
    "error",
}


def test_the_json_schema_is_generated_from_the_frame_models() -> None:
    schema = protocol_json_schema()
    json.dumps(schema)
    frames = {
        name: definition
        for name, definition in schema["$defs"].items()
        if "type" in definition.get("properties", {})
    }
    assert {frame["properties"]["type"]["const"] for frame in frames.values()} == FRAME_TYPES
    assert all(frame["additionalProperties"] is False for frame in frames.values())
    send = schema["$defs"]["SendMessage"]
    assert {"conversationId", "clientMessageId", "parts"} <= set(send["required"])
    assert send["properties"]["parts"]["maxItems"] == 10
    error_codes = set(schema["$defs"]["ErrorFrame"]["properties"]["code"]["enum"])
    assert error_codes == ERROR_CODES


def _send(parts: list[str]) -> str:
    return json.dumps(
        {
            "type": "send",
            "requestId": "r",
            "conversationId": "c-1",
            "clientMessageId": "x",
            "parts": parts,
        }
    )


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_ID = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}\Z")
_REQUEST_ID = st.from_regex(r"\A[\x21-\x7e]{1,20}\Z")


@given(
    parts=st.lists(_TEXT, min_size=1, max_size=10),
    ids=st.tuples(_ID, _ID),
    request_ids=st.tuples(_REQUEST_ID, _REQUEST_ID),
    sequence=st.integers(1, 2**53),
)
def test_the_spelled_out_ack_delivery_and_delivery_ack_frames_equal_the_models(
    parts: list[str], ids: tuple[str, str], request_ids: tuple[str, str], sequence: int
) -> None:
    alice = Participant(id="agent:alice", name="alice")
    bob = Participant(id="endpoint:b.o-b_1", name="b.o-b_1")
    message_id, conversation_id = ids
    delivery = Delivery(message_id, conversation_id, alice, (alice, bob), tuple(parts), sequence)
    assert encode_delivery(delivery) == encode(
        DeliveryFrame(
            message_id=message_id,
            conversation_id=conversation_id,
            sender=alice,
            participants=[alice, bob],
            parts=parts,
            router_sequence=sequence,
        )
    )
    request_id, client_message_id = request_ids
    assert encode_ack(request_id, client_message_id, SendAck(message_id, sequence)) == encode(
        SendAckFrame(
            request_id=request_id,
            client_message_id=client_message_id,
            message_id=message_id,
            router_sequence=sequence,
        )
    )
    assert encode_delivery_ack(message_id) == encode(DeliveryAck(message_id=message_id))


def test_a_message_is_one_to_ten_parts_of_at_most_32_kib() -> None:
    assert isinstance(parse_client_frame(_send(["a" * MAX_PART_BYTES])), SendMessage)
    assert isinstance(parse_client_frame(_send(["€" * (MAX_PART_BYTES // 3)] * 10)), SendMessage)
    for parts in ([], ["a"] * 11, ["a" * (MAX_PART_BYTES + 1)], ["€" * 10923]):
        with pytest.raises(ValidationError):
            parse_client_frame(_send(parts))


def test_frames_accept_camel_case_keys_only_and_nothing_extra() -> None:
    frame = json.loads(_send(["hi"]))
    snake = {**{k: v for k, v in frame.items() if k != "conversationId"}, "conversation_id": "c"}
    for bad in (snake, {**frame, "senderId": "agent:alice"}, {**frame, "parts": "hi"}):
        with pytest.raises(ValidationError):
            parse_client_frame(json.dumps(bad))


# ---- fuzzing a live router -------------------------------------------------------------------

ACCEPTED_CLOSES = {*CLOSE_CODES.values(), 1007, 1009}
"""Close codes a bad frame may end a connection with: ours, invalid UTF-8, too big."""


@dataclass
class LiveRouter:
    portal: BlockingPortal
    router: Router
    fuzzer: RouterCredential
    victim: AgentSession
    peer: AgentSession
    conversation_id: str


@pytest.fixture(scope="module")
def live_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRouter]:
    """One router for every example: it must stay up whatever the fuzzer sends."""
    directory: Path = tmp_path_factory.mktemp("fuzz") / "ledger"
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(make_ledger(directory)) as ledger,
        portal.wrap_async_context_manager(Router.serve(ledger)) as router,
    ):
        fuzzer, victim, peer = (router.register(n) for n in ("fuzzer", "victim", "peer"))
        portal.call(router.dispatch)
        with (
            portal.wrap_async_context_manager(connect_agent(router.url, victim.token)) as v,
            portal.wrap_async_context_manager(connect_agent(router.url, peer.token)) as p,
        ):
            conversation = portal.call(v.open, "peer")
            yield LiveRouter(portal, router, fuzzer, v, p, conversation.conversation_id)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
valid_frames = st.sampled_from(
    [
        {"type": "open", "requestId": "o", "participants": ["peer"]},
        {
            "type": "send",
            "requestId": "s",
            "conversationId": "c-1",
            "clientMessageId": "k",
            "parts": ["x"],
        },
        {"type": "delivery-ack", "messageId": "m-1"},
        {"type": "authenticate", "versions": [1], "token": "t"},
    ]
)


@st.composite
def mutated_frames(draw: st.DrawFn) -> dict[str, Any]:
    frame = dict(draw(valid_frames))
    key = draw(st.sampled_from(sorted(frame)))
    mutation = draw(st.sampled_from(["drop", "retype", "extra", "oversize-parts"]))
    if mutation == "drop":
        del frame[key]
    elif mutation == "retype":
        frame[key] = draw(json_values.filter(lambda v: not isinstance(v, str)))
    elif mutation == "extra":
        frame[draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in frame))] = 1
    else:
        frame["parts"] = draw(
            st.sampled_from([[], ["p"] * 11, ["p" * (MAX_PART_BYTES + 1)], [1, 2]])
        )
    return frame


def _is_valid(raw: str | bytes) -> bool:
    try:
        parse_client_frame(raw)
    except ValidationError:
        return False
    return True


bad_after_authentication = st.one_of(
    st.text(max_size=200).filter(lambda t: not _is_valid(t)),
    json_values.map(json.dumps).filter(lambda t: not _is_valid(t)),
    mutated_frames().map(json.dumps).filter(lambda t: not _is_valid(t)),
    st.binary(max_size=64),
    # well-formed, but out of order or naming what does not exist
    st.sampled_from(
        [
            {"type": "authenticate", "versions": [1], "token": "again"},
            {"type": "delivery-ack", "messageId": "m-999999"},
            {"type": "open", "requestId": "o", "participants": ["nobody"]},
            {
                "type": "send",
                "requestId": "s",
                "conversationId": "c-999",
                "clientMessageId": "k",
                "parts": ["x"],
            },
        ]
    ).map(json.dumps),
    st.just("x" * (MAX_FRAME_BYTES + 1)),
)
bad_first_frames = st.one_of(
    bad_after_authentication,
    st.sampled_from(
        [
            {"type": "authenticate", "versions": [2, 3], "token": "t"},
            {"type": "authenticate", "versions": [1], "token": "wrong"},
            {"type": "heartbeat"},
            {"type": "delivery-ack", "messageId": "m-1"},
        ]
    ).map(json.dumps),
)


async def _probe(url: str, token: str | None, frames: list[str | bytes]) -> list[str]:
    """Each bad frame gets a typed error frame, or the connection closes with a known code."""
    outcomes: list[str] = []
    async with connect(url, max_size=None) as websocket:
        if token is not None:
            await websocket.send(
                json.dumps({"type": "authenticate", "versions": [1], "token": token})
            )
            assert json.loads(await websocket.recv())["type"] == "authenticated"
        for frame in frames:
            try:
                await websocket.send(frame)
                with anyio.fail_after(5):
                    answer = json.loads(await websocket.recv())
                    while answer["type"] == "heartbeat":
                        answer = json.loads(await websocket.recv())
            except ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code in ACCEPTED_CLOSES, closed
                outcomes.append(f"closed {closed.rcvd.code}")
                return outcomes
            assert answer["type"] == "error", answer
            assert answer["code"] in ERROR_CODES
            outcomes.append(f"error {answer['code']}")
        if token is None:  # a refused first frame also ends the connection
            with anyio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
                await websocket.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CLOSE_CODES[answer["code"]]
    return outcomes


async def _victim_still_talks(live: LiveRouter) -> None:
    with anyio.fail_after(10):
        ack = await live.victim.send(live.conversation_id, "still here")
        async for delivery in live.peer.deliveries():
            assert delivery.message_id == ack.message_id
            break


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    authenticated=st.booleans(),
    first=bad_first_frames,
    more=st.lists(bad_after_authentication, max_size=3),
)
def test_malformed_oversized_and_out_of_order_frames_get_a_typed_error_or_close_code(
    live_router: LiveRouter, authenticated: bool, first: str | bytes, more: list[str | bytes]
) -> None:
    assume(not (authenticated and first == json.dumps({"type": "heartbeat"})))
    live = live_router
    token = live.fuzzer.token if authenticated else None
    frames = [first, *more] if authenticated else [first]
    for outcome in live.portal.call(_probe, live.router.url, token, frames):
        event(outcome)
    live.portal.call(_victim_still_talks, live)
