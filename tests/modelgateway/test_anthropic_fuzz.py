"""Fuzzing the live Anthropic Messages endpoint with hostile bodies: typed Anthropic errors,
bounded calls, never a 500, and the budget's books balanced after every example."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from fake_provider import FakeProviderServer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_gateway_fuzz import LiveGateway, RecordingLedger, json_values

from controller.modelgateway import ModelGateway, ProviderConfig

KEY_NAME = "FAKE_PROVIDER_API_KEY"
CAP = 64
BUDGET = 10**7
TYPED = {200, 400, 403, 404, 413, 429}
ERROR_TYPES = {
    "invalid_request_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
}


@pytest.fixture(scope="module")
def live_gateway() -> Iterator[LiveGateway]:
    """One gateway for every example: it must keep answering whatever the fuzzer sends."""
    with FakeProviderServer() as fake, start_blocking_portal("asyncio") as portal:
        provider = ProviderConfig(
            name="fake",
            base_url=fake.base_url,
            model="fake-model",
            api_key_name=KEY_NAME,
            max_attempts=1,
            timeout_s=5.0,
            max_completion_tokens=CAP,
        )
        gateway = ModelGateway([provider], ledger=RecordingLedger(), credentials={KEY_NAME: "k"})
        with portal.wrap_async_context_manager(gateway):
            tokens = {
                "open": gateway.issue_token("open"),
                "budgeted": gateway.issue_token("budgeted", token_budget=BUDGET),
            }
            yield LiveGateway(portal, gateway, fake, tokens)


ASK = {"model": "fake-model", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "image", "thinking", "x"])},
    optional={
        "text": json_values,
        "id": json_values,
        "name": json_values,
        "input": json_values,
        "tool_use_id": json_values,
        "content": json_values | st.lists(st.fixed_dictionaries({"type": st.just("text")})),
        "is_error": json_values,
    },
)
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system", "tool"]) | json_values,
            "content": st.text(max_size=20) | st.lists(blocks, max_size=3) | json_values,
        }
    ),
    max_size=4,
)


@st.composite
def mutated_asks(draw: st.DrawFn) -> bytes:
    body: dict[str, Any] = dict(ASK)
    body["messages"] = draw(messages) or ASK["messages"]
    for key in draw(
        st.lists(
            st.sampled_from(
                ["system", "max_tokens", "model", "stream", "tools", "tool_choice", "temperature",
                 "top_p", "stop_sequences", "metadata", "thinking"]
            ),
            max_size=4,
        )
    ):  # fmt: skip
        body[key] = draw(
            json_values | st.integers(-(2**70), 2**70) | st.sampled_from([1, 64, 100_000])
        )
    return json.dumps(body).encode()


bodies = st.one_of(
    mutated_asks(),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.sampled_from(
        [
            b'{"messages":[],"max_tokens":NaN}',
            b'{"messages":[{"role":"user","content":"lone \\ud800"}],"max_tokens":1}',
            b'{"messages":[{"role":"user","content":"x"}],"system":[{"type":"text"}]}',
        ]
    ),
    st.integers(1, 50_000).map(lambda depth: b'{"messages":' * depth),
)


async def _post(base_url: str, token: str, body: bytes) -> httpx.Response:
    headers = {"x-api-key": token, "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=20) as client:
        return await client.post("/messages?beta=true", content=body)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(who=st.sampled_from(["open", "budgeted"]), body=bodies)
def test_hostile_messages_get_typed_anthropic_errors_and_only_bounded_calls_go_forward(
    live_gateway: LiveGateway, who: str, body: bytes
) -> None:
    live = live_gateway
    seen = len(live.fake.requests)
    response = live.portal.call(_post, live.gateway.base_url, live.tokens[who], body)
    event(f"{who} {response.status_code}")
    assert response.status_code in TYPED, response.text
    if response.headers["content-type"] == "text/event-stream":
        assert response.status_code == 200 and response.text.startswith("event: message_start")
    elif response.status_code == 200:
        assert response.json()["type"] == "message"
    else:
        payload = response.json()
        assert payload["type"] == "error" and payload["error"]["type"] in ERROR_TYPES
        assert isinstance(payload["error"]["code"], str) and payload["error"]["message"]
    for _, forwarded in live.fake.requests[seen:]:
        assert forwarded.get("max_tokens", 0) is not None and forwarded.get("max_tokens", 0) <= CAP
        assert "stream" not in forwarded and "n" not in forwarded
        assert {m["role"] for m in forwarded["messages"]} <= {"system", "user", "assistant", "tool"}
    budget = live.budget()
    assert budget.reserved == 0 and budget.charged <= BUDGET
