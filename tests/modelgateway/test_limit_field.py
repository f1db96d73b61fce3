"""A provider that honours one completion-limit field gets the forwarded limit in it."""

from __future__ import annotations

from typing import Any

import pytest
from fake_provider import FakeProviderServer

from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.provider import ProviderConnection

pytestmark = pytest.mark.anyio


async def forwarded(limit_field: str | None, request: dict[str, Any]) -> dict[str, Any]:
    with FakeProviderServer() as fake:
        config = ProviderConfig(
            name="p", base_url=fake.base_url, model="m", limit_field=limit_field
        )
        connection = ProviderConnection(config, None)
        try:
            await connection.chat_completion(request)
        finally:
            await connection.aclose()
        return fake.requests[-1][1]


async def test_a_limit_sent_only_as_max_completion_tokens_also_reaches_max_tokens() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body = await forwarded("max_tokens", {**chat, "max_completion_tokens": 48})
    assert body["max_tokens"] == 48 and body["max_completion_tokens"] == 48
    assert "max_tokens" not in await forwarded(None, {**chat, "max_completion_tokens": 48})
    assert (await forwarded("max_tokens", {**chat, "max_tokens": 7}))["max_tokens"] == 7
