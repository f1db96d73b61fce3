"""The model gateway against a scripted fake provider: auth, retries, error classes, secrets."""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from controller.modelgateway import (
    AgentModelBudgetReached,
    AgentModelCallFailed,
    AgentModelUsage,
    ModelGateway,
    ModelGatewayError,
    ModelPrice,
    ProviderConfig,
)
from controller.modelgateway._http import MAX_BODY_BYTES
from controller.modelgateway.provider import classify_status

pytestmark = pytest.mark.anyio

API_KEY = "sk-test-Zq8v1N0tAsEcReT-do-not-leak-4c2f"
KEY_NAME = "FAKE_PROVIDER_API_KEY"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def provider_for(fake: Any, **overrides: Any) -> ProviderConfig:
    config = ProviderConfig(
        name="fake",
        base_url=fake.base_url,
        model="fake-model",
        api_key_name=KEY_NAME,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        timeout_s=5.0,
    )
    return replace(config, **overrides)


def gateway_for(fake: Any, ledger: Any, **overrides: Any) -> ModelGateway:
    return ModelGateway(
        [provider_for(fake, **overrides)], ledger=ledger, credentials={KEY_NAME: API_KEY}
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # nothing listens there any more: connections are refused


async def chat(gateway: ModelGateway, token: str | None, body: Any = CHAT) -> httpx.Response:
    """One call with ``body`` sent as ``json.dumps`` gives it (its size is the prompt bound)."""
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(base_url=gateway.base_url, headers=headers) as client:
        return await client.post("/chat/completions", content=json.dumps(body))


async def test_a_call_is_forwarded_with_the_provider_key_and_its_usage_recorded(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        response = await chat(gateway, gateway.issue_token("alice"))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hello"
    [(headers, body)] = fake_provider.requests
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert body["messages"] == CHAT["messages"]
    [event] = ledger.events
    assert isinstance(event, AgentModelUsage)
    assert (event.agent, event.model, event.prompt_tokens, event.completion_tokens) == (
        "alice",
        "fake-model",
        11,
        7,
    )
    assert event.cost_usd is None  # the pricing table does not know fake-model
    assert event.attempts == 1 and event.latency_ms > 0
    assert ledger.producers == ["model-gateway"]


async def test_a_429_then_200_is_retried_and_succeeds(fake_provider: Any, ledger: Any) -> None:
    fake_provider.script = [
        fake_provider.error(429, "Rate limit reached", "rate_limit_exceeded"),
        fake_provider.completion(),
    ]
    async with gateway_for(fake_provider, ledger) as gateway:
        response = await chat(gateway, gateway.issue_token("alice"))
    assert response.status_code == 200
    assert len(fake_provider.requests) == 2
    [event] = ledger.events
    assert isinstance(event, AgentModelUsage) and event.attempts == 2


async def test_a_5xx_is_retried_until_attempts_run_out_and_does_not_end_model_use(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [fake_provider.error(503, "overloaded")]
    async with gateway_for(fake_provider, ledger, max_attempts=3) as gateway:
        token = gateway.issue_token("alice")
        first = await chat(gateway, token)
        fake_provider.script = [fake_provider.completion()]
        second = await chat(gateway, token)
    assert first.status_code == 502
    assert second.status_code == 200
    failed = ledger.events[0]
    assert isinstance(failed, AgentModelCallFailed)
    assert (failed.error_class, failed.status, failed.attempts, failed.ends_model_use) == (
        "unknown",
        503,
        3,
        False,
    )


async def test_a_401_is_classified_auth_recorded_and_ends_that_agents_model_use(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [fake_provider.error(401, "Incorrect API key provided")]
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        first = await chat(gateway, token)
        second = await chat(gateway, token)
        summary = gateway.usage_summary()
    assert len(fake_provider.requests) == 1  # auth errors are not retried, later calls not sent
    assert first.status_code == 403 and first.json()["error"]["code"] == "auth"
    assert second.status_code == 403
    assert second.json()["error"]["code"] == "model_use_ended"
    reason = second.json()["error"]["message"]
    assert "model use ended for agent 'alice'" in reason and KEY_NAME in reason
    [event] = ledger.events
    assert isinstance(event, AgentModelCallFailed)
    assert (event.error_class, event.status, event.ends_model_use) == ("auth", 401, True)
    assert "Incorrect API key provided" in event.detail
    alice = summary.agents["alice"]
    assert (alice.calls, alice.failed_calls, alice.refused_calls, alice.ended_by) == (
        1,
        1,
        1,
        "auth",
    )


async def test_an_ended_agent_does_not_stop_other_agents(fake_provider: Any, ledger: Any) -> None:
    fake_provider.script = [
        fake_provider.error(402, "payment required"),
        fake_provider.completion(),
    ]
    async with gateway_for(fake_provider, ledger) as gateway:
        alice, bob = gateway.issue_token("alice"), gateway.issue_token("bob")
        assert (await chat(gateway, alice)).status_code == 403
        assert (await chat(gateway, bob)).status_code == 200
        assert (await chat(gateway, alice)).json()["error"]["code"] == "model_use_ended"


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        (401, {}, "auth"),
        (403, {}, "auth"),
        (402, {}, "quota"),
        (429, {"error": {"code": "insufficient_quota", "message": "You exceeded..."}}, "quota"),
        (429, {"error": {"type": "insufficient_quota"}}, "quota"),
        (429, {"error": {"code": "rate_limit_exceeded"}}, "rate_limit"),
        (429, None, "rate_limit"),
        (400, {"error": {"message": "bad request"}}, "unknown"),
        (500, None, "unknown"),
    ],
)
async def test_provider_errors_are_classified(status: int, payload: object, expected: str) -> None:
    assert classify_status(status, payload) == expected


async def test_insufficient_quota_is_not_retried_and_ends_model_use(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [
        fake_provider.error(429, "You exceeded your quota", "insufficient_quota")
    ]
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        await chat(gateway, token)
        second = await chat(gateway, token)
    assert len(fake_provider.requests) == 1
    assert "out of quota" in second.json()["error"]["message"]
    assert ledger.events[0].error_class == "quota"


async def test_network_errors_are_retried_then_classified_network(ledger: Any) -> None:
    provider = ProviderConfig(
        name="gone",
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        model="gone-model",
        max_attempts=2,
        backoff_initial_s=0.01,
    )
    async with ModelGateway([provider], ledger=ledger) as gateway:
        response = await chat(gateway, gateway.issue_token("alice"), {"messages": []})
    assert response.status_code == 502
    [event] = ledger.events
    assert isinstance(event, AgentModelCallFailed)
    assert (event.error_class, event.status, event.attempts) == ("network", None, 2)


async def test_a_bad_agent_token_gets_401_and_reaches_no_provider(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        old = gateway.issue_token("alice")
        gateway.issue_token("alice")  # re-issuing revokes the old token
        responses = [
            await chat(gateway, None),
            await chat(gateway, "not-a-token"),
            await chat(gateway, old),
        ]
        async with httpx.AsyncClient() as client:
            models = await client.get(f"{gateway.base_url}/models")
    assert [r.status_code for r in responses] == [401, 401, 401]
    assert responses[0].headers["www-authenticate"] == "Bearer"
    assert models.status_code == 401
    assert fake_provider.requests == []
    assert ledger.events == []


async def test_an_agent_lists_the_offered_models(fake_provider: Any, ledger: Any) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}) as client:
            models = await client.get(f"{gateway.base_url}/models")
    assert [m["id"] for m in models.json()["data"]] == ["fake-model"]


async def test_an_unknown_model_or_a_stream_request_is_refused_before_the_provider(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        unknown = await chat(gateway, token, {**CHAT, "model": "gpt-9"})
        stream = await chat(gateway, token, {**CHAT, "stream": True})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert stream.status_code == 400
    assert fake_provider.requests == []


async def test_the_api_key_never_appears_in_events_logs_or_the_summary(
    fake_provider: Any, ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_provider.script = [
        fake_provider.completion(),
        fake_provider.error(500, f"upstream echoed your key {API_KEY}"),
        fake_provider.error(401, f"Incorrect API key provided: {API_KEY}"),
    ]
    async with gateway_for(fake_provider, ledger, max_attempts=1) as gateway:
        token = gateway.issue_token("alice")
        agent_visible = [(await chat(gateway, token)).text for _ in range(4)]
        summary = gateway.usage_summary()
    assert fake_provider.requests[0][0]["authorization"] == f"Bearer {API_KEY}"
    assert len(ledger.events) == 3
    recorded = [event.model_dump_json() for event in ledger.events]
    assert KEY_NAME in recorded[2]  # the credential's name is evidence, its value is not
    for text in [*recorded, caplog.text, summary.model_dump_json(), *agent_visible]:
        assert API_KEY not in text


async def test_a_missing_credential_stops_the_gateway_from_starting(ledger: Any) -> None:
    provider = ProviderConfig(
        name="p", base_url="http://127.0.0.1:9/v1", model="m", api_key_name="SOCIETY_TEST_UNSET_KEY"
    )
    with pytest.raises(ModelGatewayError) as raised:
        async with ModelGateway([provider], ledger=ledger, credentials={}):
            pass
    assert raised.value.reason == "credential-missing"
    assert "SOCIETY_TEST_UNSET_KEY" in str(raised.value)


async def test_calls_to_one_provider_start_at_least_min_interval_apart(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger, min_interval_s=0.1) as gateway:
        token = gateway.issue_token("alice")
        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for _ in range(4):
                tasks.start_soon(chat, gateway, token)
        elapsed = time.perf_counter() - started
    assert len(fake_provider.requests) == 4
    assert elapsed >= 0.3


async def test_usage_summary_keeps_an_unknown_cost_unknown(fake_provider: Any, ledger: Any) -> None:
    fake_provider.script = [fake_provider.completion(10, 5), fake_provider.completion(20, 6)]
    prices_known = {"fake-model": ModelPrice(1.0, 2.0)}
    async with ModelGateway(
        [provider_for(fake_provider)],
        ledger=ledger,
        credentials={KEY_NAME: API_KEY},
        prices=prices_known,
    ) as gateway:
        token = gateway.issue_token("alice")
        gateway.issue_token("idle")
        await chat(gateway, token)
        await chat(gateway, token)
        priced = gateway.usage_summary()
    assert priced.agents["alice"].prompt_tokens == 30
    assert priced.agents["alice"].cost_usd == pytest.approx((30 * 1.0 + 11 * 2.0) / 1e6)
    assert priced.agents["idle"].cost_usd == 0.0 and priced.agents["idle"].calls == 0

    async with gateway_for(fake_provider, ledger) as gateway:  # fake-model has no price here
        token = gateway.issue_token("alice")
        await chat(gateway, token)
        unpriced = gateway.usage_summary()
    assert unpriced.agents["alice"].cost_usd is None
    assert unpriced.total.cost_usd is None
    assert unpriced.model_dump(by_alias=True)["total"]["costUsd"] is None


async def test_one_agent_connection_carries_many_calls(fake_provider: Any, ledger: Any) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        async with httpx.AsyncClient(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {token}"}
        ) as client:
            statuses = [(await client.post("/chat/completions", json=CHAT)).status_code]
            statuses += [(await client.post("/chat/completions", json=CHAT)).status_code]
            statuses += [(await client.get("/models")).status_code]
    assert statuses == [200, 200, 200]
    assert len(ledger.events) == 2


async def test_a_malformed_http_request_gets_400(fake_provider: Any, ledger: Any) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        port = int(gateway.base_url.rsplit(":", 1)[1].split("/")[0])
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"NOT HTTP AT ALL\r\n\r\n")
            answer = await stream.receive()
    assert answer.startswith(b"HTTP/1.1 400")


async def test_calls_go_forward_while_their_worst_case_fits_and_the_first_that_does_not_ends_use(
    fake_provider: Any, ledger: Any
) -> None:
    body = len(json.dumps(CHAT))  # each call's prompt is bounded by its bytes
    budget = 2 * body + 40
    async with gateway_for(fake_provider, ledger) as gateway:
        spender = gateway.issue_token("alice", token_budget=budget)
        other = gateway.issue_token("bob", token_budget=budget)
        statuses = [(await chat(gateway, spender)).status_code for _ in range(12)]
        bob = await chat(gateway, other)
        summary = gateway.usage_summary()
    # The fake measures 11 prompt + 7 completion tokens, fewer if max_tokens is lower.
    caps, left = [], budget
    while left >= body + 1:  # the worst case (bytes + max_tokens) still fits
        caps.append(left - body)
        left -= 11 + min(7, left - body)
    calls = len(caps)
    assert calls >= 2
    assert statuses == [200] * calls + [403] * (12 - calls) and bob.status_code == 200
    [reached] = [e for e in ledger.events if isinstance(e, AgentModelBudgetReached)]
    assert (reached.agent, reached.budget_tokens, reached.used_tokens, reached.calls) == (
        "alice",
        budget,
        budget - left,
        calls,
    )
    assert reached.used_tokens <= budget
    forwarded = [request for _, request in fake_provider.requests]
    assert len(forwarded) == calls + 1  # refused calls never reached the provider
    assert [request["max_tokens"] for request in forwarded[:calls]] == caps
    alice = summary.agents["alice"]
    assert (alice.calls, alice.refused_calls, alice.ended_by) == (calls, 12 - calls, "token_budget")
    assert summary.agents["bob"].ended_by is None


TINY = {"messages": []}  # 16 bytes: the smallest prompt bound a call can have


async def test_six_concurrent_calls_on_a_20_token_budget_spend_at_most_20_tokens(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice", token_budget=20)
        answers: list[httpx.Response] = []

        async def call() -> None:
            answers.append(await chat(gateway, token, TINY))

        async with anyio.create_task_group() as tasks:
            for _ in range(6):
                tasks.start_soon(call)
        summary = gateway.usage_summary()
    spent = [e.prompt_tokens + e.completion_tokens for e in ledger.events if _used(e)]
    assert sum(spent) <= 20, spent  # before: 6 x 18 = 108
    assert summary.agents["alice"].prompt_tokens + summary.agents["alice"].completion_tokens <= 20
    for _, request in fake_provider.requests:
        assert len(json.dumps(TINY)) + request["max_tokens"] <= 20
    codes = sorted(a.json()["error"]["code"] for a in answers if a.status_code != 200)
    assert set(codes) <= {"budget_reserved", "model_use_ended"} and len(codes) >= 5


def _used(event: object) -> bool:
    return isinstance(event, AgentModelUsage)


async def test_max_tokens_is_capped_and_n_other_than_one_is_refused_before_forwarding(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger, max_completion_tokens=512) as gateway:
        token = gateway.issue_token("alice")
        huge = await chat(gateway, token, {**CHAT, "max_tokens": 100_000})
        newer = await chat(gateway, token, {**CHAT, "max_completion_tokens": 100_000})
        small = await chat(gateway, token, {**CHAT, "max_tokens": 5})
        many = await chat(gateway, token, {**CHAT, "n": 64})
        odd = await chat(gateway, token, {**CHAT, "max_tokens": -1})
    assert [r.status_code for r in (huge, newer, small)] == [200, 200, 200]
    forwarded = [request for _, request in fake_provider.requests]
    assert forwarded[0]["max_tokens"] == 512
    assert forwarded[1]["max_completion_tokens"] == 512 and "max_tokens" not in forwarded[1]
    assert forwarded[2]["max_tokens"] == 5
    assert (many.status_code, many.json()["error"]["code"]) == (400, "n_unsupported")
    assert (odd.status_code, odd.json()["error"]["code"]) == (400, "invalid_request")
    assert len(forwarded) == 3


async def test_a_call_whose_provider_omits_usage_is_charged_its_whole_reservation(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [fake_provider.completion(usage=False)]
    request = {**CHAT, "max_tokens": 10}
    worst = len(json.dumps(request)) + 10
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice", token_budget=3 * worst)
        statuses = [(await chat(gateway, token, request)).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 403, 403]  # before: never counted, never refused
    usage = [e for e in ledger.events if isinstance(e, AgentModelUsage)]
    assert [(e.prompt_tokens, e.completion_tokens) for e in usage] == [(None, None)] * 3
    [reached] = [e for e in ledger.events if isinstance(e, AgentModelBudgetReached)]
    assert reached.used_tokens == 3 * worst and len(fake_provider.requests) == 3


async def raw_exchange(gateway: ModelGateway, data: bytes, within: float = 10) -> bytes:
    """Send ``data`` on a raw connection; everything the gateway answers until it closes."""
    port = int(gateway.base_url.rsplit(":", 1)[1].split("/")[0])
    received = b""
    with anyio.fail_after(within):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(data)
            try:
                while True:
                    received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return received


def head(token: str, length: int) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n"
        f"content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


async def test_the_token_is_checked_before_any_body_is_read_and_a_large_body_is_refused_unread(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        # 16 MiB announced, none sent: the answer cannot wait for the body
        stranger = await raw_exchange(gateway, head("not-a-token", 16 * 1024 * 1024))
        oversize = await raw_exchange(gateway, head(token, MAX_BODY_BYTES + 1))
    assert stranger.startswith(b"HTTP/1.1 401") and b"invalid_api_key" in stranger
    assert oversize.startswith(b"HTTP/1.1 413")
    assert fake_provider.requests == []


async def test_a_request_that_stops_arriving_is_answered_408_and_closed(
    fake_provider: Any, ledger: Any
) -> None:
    async with ModelGateway(
        [provider_for(fake_provider)],
        ledger=ledger,
        credentials={KEY_NAME: API_KEY},
        request_timeout_s=0.5,
    ) as gateway:
        token = gateway.issue_token("alice")
        stalled = await raw_exchange(gateway, head(token, 100) + b'{"messages":')
        idle = await raw_exchange(gateway, b"")
    assert stalled.startswith(b"HTTP/1.1 408")
    assert idle == b""  # an idle connection is closed, not held
    assert fake_provider.requests == []


PIXEL = "data:image/png;base64," + "iVBORw0KGgo" * 100  # about 1.1 KiB of request
UNPRICED = [
    [{"type": "image_url", "image_url": {"url": PIXEL, "detail": "high"}}],
    [{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}],
    [{"type": "file", "file": {"file_data": PIXEL}}],
    [{"type": "text", "text": "look", "image_url": {"url": PIXEL}}],  # smuggled in a text part
    [{"image_url": {"url": PIXEL}}],  # no type at all
]


@pytest.mark.parametrize("content", UNPRICED)
async def test_a_part_the_budget_cannot_price_is_refused_and_never_reaches_the_provider(
    fake_provider: Any, ledger: Any, content: list[dict[str, Any]]
) -> None:
    request = {**CHAT, "messages": [{"role": "user", "content": content}]}
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice", token_budget=2_000)
        answer = await chat(gateway, token, request)
        text = await chat(
            gateway,
            token,
            {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}]}]},
        )
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "unpriced_content")
    assert text.status_code == 200  # text parts are priced: one token per byte at most
    assert len(fake_provider.requests) == 1
    assert gateway.usage_summary().agents["alice"].ended_by is None


@pytest.mark.parametrize(
    "extra",
    [
        {"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]},
        {"modalities": ["audio"]},
        {"prediction": {"type": "content", "content": "x"}},
        {"web_search_options": {}},
    ],
)
async def test_a_request_field_that_bills_outside_the_worst_case_is_refused(
    fake_provider: Any, ledger: Any, extra: dict[str, Any]
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice", token_budget=2_000)
        answer = await chat(gateway, token, {**CHAT, **extra})
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "unpriced_content")
    assert fake_provider.requests == []
