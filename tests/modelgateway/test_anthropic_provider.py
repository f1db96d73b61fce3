"""A configured provider that speaks Anthropic Messages, behind both of the gateway's endpoints:
its key only in the gateway (as ``x-api-key``), the agent's token never forwarded, usage from its
``input_tokens``/``output_tokens``, budgets and error classes as for any provider."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from controller.modelgateway import (
    AgentModelCallFailed,
    AgentModelUsage,
    ModelGateway,
    ProviderConfig,
)

pytestmark = pytest.mark.anyio

KEY_NAME = "FAKE_ANTHROPIC_API_KEY"
API_KEY = "sk-ant-test-only-the-gateway-holds-this-91c3"


class FakeAnthropic:
    """An Anthropic-Messages provider on 127.0.0.1 that plays ``script`` (status, Message) in
    order, then repeats the last; it never reports more output tokens than ``max_tokens``."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, Any]]] = [(200, message("hello"))]
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append((self.path, headers, body))
                status, reply = fake.script.pop(0) if len(fake.script) > 1 else fake.script[0]
                if "usage" in reply:
                    usage = dict(reply["usage"])
                    usage["output_tokens"] = min(usage["output_tokens"], body["max_tokens"])
                    reply = {**reply, "usage": usage}
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def message(text: str, *, tool: dict[str, Any] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool is not None:
        content.append({"type": "tool_use", "id": "toolu_9", **tool})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": content,
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 9},
    }


@pytest.fixture
def anthropic() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic()
    yield fake
    fake.close()


def gateway_for(fake: FakeAnthropic, ledger: Any) -> ModelGateway:
    provider = ProviderConfig(
        name="anthropic",
        base_url=fake.base_url,
        model="claude-fake",
        api_key_name=KEY_NAME,
        api="anthropic-messages",
        backoff_initial_s=0.01,
        backoff_max_s=0.02,
        max_completion_tokens=256,
    )
    return ModelGateway([provider], ledger=ledger, credentials={KEY_NAME: API_KEY})


async def test_a_messages_call_reaches_the_provider_with_its_key_and_the_agents_usage_is_recorded(
    anthropic: FakeAnthropic, ledger: Any
) -> None:
    anthropic.script = [
        (200, message("Sending.", tool={"name": "send_message", "input": {"text": "40"}}))
    ]
    async with gateway_for(anthropic, ledger) as gateway:
        token = gateway.issue_token("alice", token_budget=50_000)
        async with httpx.AsyncClient(base_url=gateway.base_url, headers={"x-api-key": token}) as c:
            answer = await c.post(
                "/messages?beta=true",
                json={
                    "model": "claude-fake",
                    "max_tokens": 100_000,
                    "stream": True,
                    "system": "You are Alice.",
                    "messages": [
                        {"role": "user", "content": "Offer."},
                        {"role": "assistant", "content": [
                            {"type": "tool_use", "id": "toolu_1", "name": "send_message",
                             "input": {"text": "30"}}]},
                        {"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
                    ],
                    "tools": [{"name": "send_message", "input_schema": {"type": "object"}}],
                },
            )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert "event: message_stop" in answer.text and '"name": "send_message"' in answer.text
    [(path, headers, body)] = anthropic.requests
    assert path == "/v1/messages"
    assert headers["x-api-key"] == API_KEY and headers["anthropic-version"] == "2023-06-01"
    assert token not in json.dumps(headers) + json.dumps(body)
    assert body["system"] == "You are Alice." and body["max_tokens"] == 256
    assert body["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "send_message",
        "input": {"text": "30"},
    }
    assert body["messages"][2]["content"][0]["type"] == "tool_result"
    assert body["tools"][0]["name"] == "send_message"
    [event] = ledger.events
    assert isinstance(event, AgentModelUsage) and event.provider == "anthropic"
    assert (event.prompt_tokens, event.completion_tokens) == (21, 9)


async def test_an_openai_client_reaches_an_anthropic_provider_through_the_chat_endpoint(
    anthropic: FakeAnthropic, ledger: Any
) -> None:
    async with gateway_for(anthropic, ledger) as gateway:
        token = gateway.issue_token("bob")
        async with httpx.AsyncClient(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {token}"}
        ) as client:
            answer = await client.post(
                "/chat/completions",
                json={"messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "hi"}], "max_tokens": 5},
            )  # fmt: skip
    assert answer.status_code == 200, answer.text
    completion = answer.json()
    assert completion["choices"][0]["message"]["content"] == "hello"
    assert completion["usage"] == {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26}
    [(_, _, body)] = anthropic.requests
    assert body["system"] == "Be brief." and body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]


async def test_a_refused_key_at_an_anthropic_provider_is_auth_and_ends_that_agents_model_use(
    anthropic: FakeAnthropic, ledger: Any
) -> None:
    error = {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
    anthropic.script = [(401, error)]
    async with gateway_for(anthropic, ledger) as gateway:
        token = gateway.issue_token("alice")
        async with httpx.AsyncClient(base_url=gateway.base_url, headers={"x-api-key": token}) as c:
            ask = {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            first, later = await c.post("/messages", json=ask), await c.post("/messages", json=ask)
    assert first.status_code == 403 and first.json()["error"]["code"] == "auth"
    assert later.json()["error"]["code"] == "model_use_ended"
    [failed] = [e for e in ledger.events if isinstance(e, AgentModelCallFailed)]
    assert failed.error_class == "auth" and "bad key" in failed.detail
    assert API_KEY not in failed.detail + first.text
    assert len(anthropic.requests) == 1
