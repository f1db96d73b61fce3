"""Credentials and identity: refused tokens, revocation, impersonation; secrets stay out."""

from __future__ import annotations

import pytest
from network_support import authenticate_raw, events, reply
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from controller.events.network import RouterMessageCommitted
from controller.network import NetworkError, connect_agent
from controller.network.router import Router
from ledger import LedgerWriter

pytestmark = pytest.mark.anyio


async def close_code(websocket: object) -> int | None:
    try:
        while True:
            await websocket.recv()  # type: ignore[attr-defined]
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None


async def test_a_wrong_token_is_refused(router: Router, ledger: LedgerWriter) -> None:
    real = router.register("alice")
    wrong = real.token[:-4] + ("AAAA" if not real.token.endswith("AAAA") else "BBBB")
    async with connect(router.url) as raw:
        answer = await authenticate_raw(raw, wrong)
        assert (answer["type"], answer["code"]) == ("error", "authentication-failed")
        assert await close_code(raw) == 4001
    with pytest.raises(NetworkError) as refused:
        async with connect_agent(router.url, "not-a-token"):
            pass
    assert refused.value.reason == "authentication-failed"
    assert not router.is_authenticated("alice")
    assert await events(ledger, RouterMessageCommitted) == []


async def test_a_token_replayed_after_revocation_is_refused(
    router: Router, ledger: LedgerWriter
) -> None:
    alice = router.register("alice")
    router.register("bob")
    await router.dispatch()
    async with connect_agent(router.url, alice.token) as session:
        conversation = await session.open("bob")
        router.revoke(alice.participant.id)
        with pytest.raises(NetworkError) as revoked:
            async for _ in session.deliveries():
                pass
        assert revoked.value.reason == "revoked"
        with pytest.raises(NetworkError):
            await session.send(conversation.conversation_id, "after revocation")
    async with connect(router.url) as raw:
        answer = await authenticate_raw(raw, alice.token)
        assert answer["code"] == "authentication-failed"
        assert await close_code(raw) == 4001
    renewed = router.register("alice")
    assert renewed.participant == alice.participant and renewed.token != alice.token
    assert await events(ledger, RouterMessageCommitted) == []


async def test_no_participant_can_send_as_another(router: Router, ledger: LedgerWriter) -> None:
    alice, _, mallory = (router.register(name) for name in ("alice", "bob", "mallory"))
    await router.dispatch()
    async with connect_agent(router.url, alice.token) as session:
        private = await session.open("bob")
    async with connect(router.url) as raw:
        await authenticate_raw(raw, mallory.token)
        base = {"type": "send", "requestId": "r", "clientMessageId": "x", "parts": ["hi"]}
        spoofed = await reply(
            raw, {**base, "conversationId": private.conversation_id, "senderId": "agent:alice"}
        )
        assert spoofed["code"] == "malformed-frame"
        intruding = await reply(raw, {**base, "conversationId": private.conversation_id})
        assert intruding["code"] == "not-a-participant"
        opened = await reply(raw, {"type": "open", "requestId": "o", "participants": ["bob"]})
        ack = await reply(raw, {**base, "conversationId": opened["conversationId"]})
        assert ack["type"] == "ack"
    (committed,) = await events(ledger, RouterMessageCommitted)
    assert committed.sender_id == "agent:mallory"


async def test_an_endpoint_can_neither_take_nor_use_an_agents_identity(
    router: Router, ledger: LedgerWriter
) -> None:
    router.register("alice")
    with pytest.raises(NetworkError) as taken:
        async with router.network.endpoint("alice"):
            pass
    assert taken.value.reason == "participant-exists"
    endpoint_credential = router.register("probe", kind="endpoint")
    async with connect(router.url) as raw:
        answer = await authenticate_raw(raw, endpoint_credential.token)
        assert answer["code"] == "authentication-failed"


async def test_tokens_never_reach_the_ledger(router: Router, ledger: LedgerWriter) -> None:
    credentials = [router.register(name) for name in ("alice", "bob")]
    await router.dispatch()
    async with connect_agent(router.url, credentials[0].token) as session:
        conversation = await session.open("bob")
        await session.send(conversation.conversation_id, "hello")
    assert credentials[0].token not in repr(credentials[0])
    written = b"".join(path.read_bytes() for path in ledger.directory.iterdir())
    for credential in credentials:
        assert credential.token.encode() not in written
