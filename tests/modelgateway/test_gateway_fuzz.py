"""Fuzzing a live model gateway with hostile bodies: typed answers, bounded calls, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fake_provider import FakeProviderServer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.modelgateway import ModelGateway, ProviderConfig
from controller.modelgateway.budget import TokenBudget

KEY_NAME = "FAKE_PROVIDER_API_KEY"
CAP = 64
BUDGET = 10**7
TYPED = {200, 400, 403, 404, 413, 429}


class RecordingLedger:
    def __init__(self) -> None:
        self.events: list[object] = []

    async def append(self, event: object, *, producer: str) -> None:
        self.events.append(event)


@dataclass
class LiveGateway:
    portal: BlockingPortal
    gateway: ModelGateway
    fake: FakeProviderServer
    tokens: dict[str, str]

    def budget(self) -> TokenBudget:
        return self.gateway._budgets["budgeted"]


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


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


@st.composite
def mutated_chats(draw: st.DrawFn) -> bytes:
    body: dict[str, Any] = dict(CHAT)
    for key in draw(
        st.lists(
            st.sampled_from(
                ["n", "max_tokens", "max_completion_tokens", "model", "stream", "messages"]
            ),
            max_size=3,
        )
    ):
        body[key] = draw(
            json_values | st.integers(-(2**70), 2**70) | st.sampled_from([1, 2, 64, 100_000])
        )
    return json.dumps(body).encode()


bodies = st.one_of(
    mutated_chats(),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.sampled_from(
        [
            b'{"messages":[],"x":NaN}',
            b'{"max_tokens":Infinity}',
            b"-Infinity",
            b'{"messages":[{"role":"user","content":"lone \\ud800"}]}',
        ]
    ),
    st.integers(1, 50_000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 50_000).map(lambda depth: b'{"messages":' * depth),
)


async def _post(base_url: str, token: str, body: bytes) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=20) as client:
        return await client.post("/chat/completions", content=body)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(who=st.sampled_from(["open", "budgeted"]), body=bodies)
def test_hostile_bodies_get_typed_answers_and_nothing_unbounded_reaches_the_provider(
    live_gateway: LiveGateway, who: str, body: bytes
) -> None:
    live = live_gateway
    seen = len(live.fake.requests)
    response = live.portal.call(_post, live.gateway.base_url, live.tokens[who], body)
    event(f"{who} {response.status_code}")
    assert response.status_code in TYPED, response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert isinstance(error["code"], str) and error["message"]
    for _, forwarded in live.fake.requests[seen:]:
        assert forwarded.get("n", 1) == 1
        for field in ("max_tokens", "max_completion_tokens"):
            assert forwarded.get(field, 0) is not None and forwarded.get(field, 0) <= CAP
        if who == "budgeted":
            assert "max_tokens" in forwarded or "max_completion_tokens" in forwarded
    budget = live.budget()
    assert budget.reserved == 0 and budget.charged <= BUDGET
