"""The gateway's Anthropic Messages endpoint, against a scripted provider: translation both ways,
the event stream, the agent's token as ``x-api-key``, budgets and error classes as on chat."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from controller.modelgateway import (
    AgentModelCallFailed,
    AgentModelUsage,
    ModelGateway,
    ProviderConfig,
)

pytestmark = pytest.mark.anyio

KEY_NAME = "FAKE_PROVIDER_API_KEY"
API_KEY = "sk-test-anthropic-path-do-not-leak-77e1"
ASK = {
    "model": "fake-model",
    "max_tokens": 32,
    "messages": [{"role": "user", "content": "hi"}],
}


def gateway_for(fake: Any, ledger: Any, **overrides: Any) -> ModelGateway:
    provider = ProviderConfig(
        name="fake",
        base_url=fake.base_url,
        model="fake-model",
        api_key_name=KEY_NAME,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        timeout_s=5.0,
    )
    return ModelGateway(
        [replace(provider, **overrides)], ledger=ledger, credentials={KEY_NAME: API_KEY}
    )


async def messages(
    gateway: ModelGateway, token: str | None, body: Any = ASK, *, path: str = "/messages"
) -> httpx.Response:
    """One call as an Anthropic client makes it: ``x-api-key``, ``anthropic-version``, a beta."""
    headers = {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219",
    }
    if token is not None:
        headers["x-api-key"] = token
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(base_url=gateway.base_url, headers=headers) as client:
        return await client.post(path, content=content)


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append((lines["event"], data))
    return events


async def test_a_message_is_answered_as_an_anthropic_message_and_its_usage_recorded(
    fake_provider: Any, ledger: Any
) -> None:
    extra = {
        "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "output_config": {"effort": "low"},
        "context_management": {"edits": []},
    }
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        response = await messages(gateway, token, {**ASK, **extra}, path="/messages?beta=true")
    assert response.status_code == 200, response.text
    message = response.json()
    assert (message["type"], message["role"], message["model"]) == (
        "message",
        "assistant",
        "fake-model",
    )
    assert message["content"] == [{"type": "text", "text": "hello"}]
    assert message["stop_reason"] == "end_turn" and message["id"].startswith("msg_")
    assert message["usage"]["input_tokens"] == 11 and message["usage"]["output_tokens"] == 7
    [(headers, forwarded)] = fake_provider.requests
    assert headers["authorization"] == f"Bearer {API_KEY}"  # the gateway's key, not the agent's
    assert forwarded["messages"] == [{"role": "user", "content": "hi"}]
    assert forwarded["max_tokens"] == 32 and "stream" not in forwarded
    assert not set(extra) & set(forwarded)  # tolerated, and dropped
    [event] = ledger.events
    assert isinstance(event, AgentModelUsage) and event.agent == "alice"
    assert (event.prompt_tokens, event.completion_tokens) == (11, 7)


async def test_a_streamed_message_is_the_full_event_sequence_of_the_same_message(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [_reply("a" * 150)]
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        streamed = await messages(gateway, token, {**ASK, "stream": True})
    assert streamed.status_code == 200
    assert streamed.headers["content-type"] == "text/event-stream"
    events = sse_events(streamed.text)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["usage"]["input_tokens"] == 11
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == "a" * 150
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 7
    assert "stream" not in fake_provider.requests[0][1]
    assert len([e for e in ledger.events if isinstance(e, AgentModelUsage)]) == 1


async def test_system_as_blocks_and_a_system_message_fold_into_one_system_prompt(
    fake_provider: Any, ledger: Any
) -> None:
    body = {
        **ASK,
        "system": [
            {"type": "text", "text": "You are Alice.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ],
        "messages": [
            {"role": "system", "content": "Never share the key."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
    }
    async with gateway_for(fake_provider, ledger) as gateway:
        response = await messages(gateway, gateway.issue_token("alice"), body)
        plain = await messages(gateway, gateway.issue_token("bob"), {**ASK, "system": "Short."})
    assert response.status_code == 200 and plain.status_code == 200
    folded, simple = (request["messages"] for _, request in fake_provider.requests)
    assert folded == [
        {"role": "system", "content": "You are Alice.\nBe brief.\n\nNever share the key."},
        {"role": "user", "content": "hi"},
    ]
    assert simple[0] == {"role": "system", "content": "Short."}


async def test_tool_use_and_tool_result_blocks_translate_both_ways(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [
        _reply(
            "Sending.",
            finish="tool_calls",
            tool_calls=[
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "send_message", "arguments": '{"text": "40 coins"}'},
                }
            ],
        )
    ]
    tool = {
        "name": "send_message",
        "description": "Send a message to the conversation",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
    body = {
        **ASK,
        "tools": [tool, {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "auto"},
        "messages": [
            {"role": "user", "content": "Offer a price."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "x"},
                    {"type": "tool_use", "id": "toolu_1", "name": "send_message",
                     "input": {"text": "30"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "sent"}]},
                    {"type": "text", "text": "Now more."},
                ],
            },
        ],
    }  # fmt: skip
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        whole = await messages(gateway, token, body)
        streamed = await messages(gateway, token, {**body, "stream": True})
    assert whole.status_code == 200, whole.text
    message = whole.json()
    assert message["stop_reason"] == "tool_use"
    assert message["content"] == [
        {"type": "text", "text": "Sending."},
        {"type": "tool_use", "id": "call_7", "name": "send_message", "input": {"text": "40 coins"}},
    ]
    forwarded = fake_provider.requests[0][1]
    assert forwarded["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "send_message", "arguments": '{"text": "30"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sent"},
        {"role": "user", "content": "Now more."},
    ]
    assert forwarded["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "send_message",
                "parameters": tool["input_schema"],
                "description": tool["description"],
            },
        }
    ]
    assert forwarded["tool_choice"] == "auto"
    events = sse_events(streamed.text)
    [tool_start] = [d for n, d in events if n == "content_block_start" and d["index"] == 1]
    assert tool_start["content_block"]["type"] == "tool_use"
    [partial] = [d["delta"] for n, d in events if n == "content_block_delta" and d["index"] == 1]
    assert partial["type"] == "input_json_delta"
    assert json.loads(partial["partial_json"]) == {"text": "40 coins"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({**ASK, "messages": []}, "messages"),
        ({**ASK, "messages": [{"role": "tool", "content": "x"}]}, "role"),
        ({**ASK, "system": 7}, "system"),
        (
            {**ASK, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "'image' block",
        ),
        ({**ASK, "temperature": "hot"}, "temperature"),
        ({**ASK, "tool_choice": {"type": "whatever"}, "tools": [{"name": "t", "input_schema": {}}]},
         "tool_choice"),
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
    ],
)  # fmt: skip
async def test_a_request_the_endpoint_cannot_translate_gets_a_typed_400_and_reaches_no_provider(
    fake_provider: Any, ledger: Any, body: Any, says: str
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        response = await messages(gateway, gateway.issue_token("alice"), body)
    assert response.status_code == 400
    payload = response.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert says in payload["error"]["message"]
    assert fake_provider.requests == [] and ledger.events == []


async def test_a_wrong_or_missing_key_gets_401_and_reaches_no_provider(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        gateway.issue_token("alice")
        wrong = await messages(gateway, "sk-ant-not-issued")
        missing = await messages(gateway, None)
    assert wrong.status_code == 401 and missing.status_code == 401
    assert fake_provider.requests == []


async def test_provider_failures_keep_their_error_class_and_an_auth_failure_ends_model_use(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [fake_provider.error(401, "bad key")]
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        first = await messages(gateway, token)
        later = await messages(gateway, token)
    assert first.status_code == 403 and first.json()["error"]["type"] == "permission_error"
    assert first.json()["error"]["code"] == "auth"
    assert later.json()["error"]["code"] == "model_use_ended"
    [failed] = [e for e in ledger.events if isinstance(e, AgentModelCallFailed)]
    assert failed.error_class == "auth" and failed.ends_model_use
    assert len(fake_provider.requests) == 1
    assert API_KEY not in first.text + later.text


async def test_a_rate_limited_provider_answers_429_as_a_rate_limit_error(
    fake_provider: Any, ledger: Any
) -> None:
    fake_provider.script = [fake_provider.error(429, "slow down")]
    async with gateway_for(fake_provider, ledger, max_attempts=2) as gateway:
        response = await messages(gateway, gateway.issue_token("alice"))
    assert response.status_code == 429
    assert response.json()["error"] | {"message": ""} == {
        "type": "rate_limit_error",
        "message": "",
        "code": "rate_limit",
    }


async def test_six_concurrent_messages_on_a_small_budget_never_spend_past_it(
    fake_provider: Any, ledger: Any
) -> None:
    small = {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    forwarded_bytes = len(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    budget = forwarded_bytes + 60
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice", token_budget=budget)
        answers: list[httpx.Response] = []

        async def call() -> None:
            answers.append(await messages(gateway, token, small))

        async with anyio.create_task_group() as tasks:
            for _ in range(6):
                tasks.start_soon(call)
    used = [e for e in ledger.events if isinstance(e, AgentModelUsage)]
    spent = sum((e.prompt_tokens or 0) + (e.completion_tokens or 0) for e in used)
    assert spent <= budget
    for _, request in fake_provider.requests:  # each forwarded call's worst case fit
        assert forwarded_bytes + request["max_tokens"] <= budget
    refused = [a.json()["error"] for a in answers if a.status_code != 200]
    assert len(refused) >= 4
    assert {e["code"] for e in refused} <= {"budget_reserved", "model_use_ended"}
    assert {e["type"] for e in refused} <= {"rate_limit_error", "permission_error"}


async def test_other_routes_under_messages_get_anthropic_shaped_404_and_405(
    fake_provider: Any, ledger: Any
) -> None:
    async with gateway_for(fake_provider, ledger) as gateway:
        token = gateway.issue_token("alice")
        counted = await messages(gateway, token, path="/messages/count_tokens")
        async with httpx.AsyncClient(base_url=gateway.base_url) as client:
            listed = await client.get("/messages", headers={"x-api-key": token})
    assert counted.status_code == 404 and counted.json()["error"]["type"] == "not_found_error"
    assert listed.status_code == 405 and listed.json()["type"] == "error"
    assert fake_provider.requests == []


def _reply(
    text: str, *, finish: str = "stop", tool_calls: list[dict[str, Any]] | None = None
) -> Any:
    from fake_provider import completion

    reply = completion()
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    reply.body["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return reply
