"""The Anthropic Messages endpoint in front of the real local model (llama.cpp, SmolLM2-135M):
whole and streamed messages, a folded system prompt and a tool round trip, usage in the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_local_model_server import require_llama_cpp

from controller.modelgateway import AgentModelUsage, ModelGateway, model_gateway_catalog
from controller.modelgateway.pricing import SMOLLM2_MODEL_ID
from controller.platforms.local_model import LocalModelServer
from ledger import Provenance, open_ledger_writer, verify_ledger

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["require_llama_cpp"]

TOOL_ROUND_TRIP = [
    {"role": "system", "content": "You are a seller. Answer in one short sentence."},
    {"role": "user", "content": "What is your price for the bike?"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "send_message",
             "input": {"text": "My price is 40 coins."}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "delivered"},
            {"type": "text", "text": "Say the price again."},
        ],
    },
]  # fmt: skip
SEND_MESSAGE = {
    "name": "send_message",
    "description": "Send a message to the other party",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


async def test_the_local_model_answers_anthropic_messages_whole_and_streamed(
    require_llama_cpp: None, tmp_path: Path
) -> None:
    async with (
        open_ledger_writer(
            tmp_path / "ledger",
            catalog=model_gateway_catalog,
            definition_id="tests.modelgateway.anthropic",
            run_id="sr-" + "1" * 32,
            provenance=Provenance.current("local"),
        ) as writer,
        LocalModelServer(n_ctx=1024) as server,
    ):
        provider = server.provider()
        async with ModelGateway([provider], ledger=writer, credentials=server.credentials) as gw:
            token = gw.issue_token("alice", token_budget=20_000)
            headers = {"x-api-key": token, "anthropic-version": "2023-06-01"}
            async with httpx.AsyncClient(base_url=gw.base_url, headers=headers, timeout=120) as c:
                whole = await c.post(
                    "/messages?beta=true",
                    json={
                        "model": SMOLLM2_MODEL_ID,
                        "max_tokens": 8,
                        "system": [{"type": "text", "text": "Answer in one word."}],
                        "messages": [{"role": "user", "content": "Say hello."}],
                        "temperature": 0,
                        "metadata": {"user_id": "alice"},
                    },
                )
                streamed = await c.post(
                    "/messages?beta=true",
                    json={
                        "model": SMOLLM2_MODEL_ID,
                        "max_tokens": 16,
                        "stream": True,
                        "messages": TOOL_ROUND_TRIP,
                        "tools": [SEND_MESSAGE],
                        "temperature": 0,
                    },
                )
        await writer.complete()
        recorded = [event async for event in writer.events(AgentModelUsage)]

    assert whole.status_code == 200, whole.text
    message = whole.json()
    assert message["content"][0]["type"] == "text" and message["content"][0]["text"].strip()
    assert message["usage"]["input_tokens"] > 0 and 1 <= message["usage"]["output_tokens"] <= 8
    assert streamed.status_code == 200, streamed.text
    events = _events(streamed.text)
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text.strip()
    first, second = recorded
    assert first.agent == second.agent == "alice" and first.model == SMOLLM2_MODEL_ID
    assert first.prompt_tokens == message["usage"]["input_tokens"]
    assert first.completion_tokens == message["usage"]["output_tokens"]
    final = next(e for e in events if e["type"] == "message_delta")
    assert second.completion_tokens == final["usage"]["output_tokens"]
    verify_ledger(model_gateway_catalog, tmp_path / "ledger")  # raises on any failure


def _events(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix("data: "))
        for line in body.splitlines()
        if line.startswith("data: ")
    ]
