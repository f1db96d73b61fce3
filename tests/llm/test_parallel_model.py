"""The local model with parallel slots: one batch for many agents, and budgets that hold under it.

Real parts only: llama.cpp's C++ server (``xllamacpp``) serving SmolLM2-135M, the real gateway and
a real ledger writer; scripts/install-llm.sh installs them. Under CI a missing part fails.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controller.modelgateway import ModelGateway, model_gateway_catalog
from controller.modelgateway.events import AgentModelBudgetReached, AgentModelUsage
from controller.platforms.local_model import (
    SLOTS_PER_CORE,
    THREADS_NAME,
    LocalModelError,
    LocalModelServer,
    local_model_slots,
    local_model_threads,
)
from ledger import Event, Provenance, open_ledger_writer

pytestmark = pytest.mark.anyio

SLOTS = 4
AGENTS = 8
CALLS_PER_AGENT = 2


class TeeLedger:
    """The real ledger writer, and the events it was given, for the test to read back."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.events: list[Event] = []

    async def append(self, event: Event, *, producer: str) -> object:
        receipt = await self.writer.append(event, producer=producer)
        self.events.append(event)
        return receipt


def chat(text: str, max_tokens: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0.7,
    }


@pytest.mark.slow
async def test_the_parallel_local_model_decodes_several_agents_requests_in_one_batch(
    require_llama_cpp: None, tmp_path: Path
) -> None:
    peak = 0
    async with LocalModelServer(n_ctx=512, slots=SLOTS) as server:
        key = server.credentials[server.api_key_name]
        headers = {"authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(
            base_url=server.base_url.removesuffix("/v1"), headers=headers, timeout=300
        ) as http:
            done = anyio.Event()

            async def ask(i: int) -> None:
                prompt = f"Agent {i}: tell a long story about a lighthouse."
                response = await http.post("/v1/chat/completions", json=chat(prompt, 48))
                assert response.status_code == 200, response.text

            async def watch() -> None:
                nonlocal peak
                while not done.is_set():
                    slots = (await http.get("/slots")).json()
                    peak = max(peak, sum(1 for slot in slots if slot["is_processing"]))
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                async with anyio.create_task_group() as askers:
                    for i in range(SLOTS):
                        askers.start_soon(ask, i)
                done.set()
    assert server.slots == SLOTS
    assert peak >= 2, f"at most {peak} request(s) were decoded at once"


@pytest.mark.slow
async def test_the_gateway_records_each_agents_exact_usage_and_holds_a_budget_under_parallel_calls(
    require_llama_cpp: None, tmp_path: Path
) -> None:
    """Eight agents call at once through the gateway; each one's recorded usage is exactly what
    the server reported to it. A budgeted agent's concurrent calls never overspend its budget, and
    once it is spent the next call is refused with ``model_use_ended``."""
    budget = 600
    reported: dict[str, Counter[str]] = {}
    statuses: Counter[str] = Counter()
    async with (
        open_ledger_writer(
            tmp_path / "ledger",
            catalog=model_gateway_catalog,
            definition_id="tests.parallel-model",
            run_id="sr-" + "0" * 32,
            provenance=Provenance.current("local"),
        ) as writer,
        LocalModelServer(n_ctx=512, slots=SLOTS) as server,
    ):
        ledger = TeeLedger(writer)
        provider = replace(server.provider(), max_concurrency=server.slots)
        async with ModelGateway(
            [provider], ledger=ledger, credentials=server.credentials
        ) as gateway:
            tokens = {f"agent-{i}": gateway.issue_token(f"agent-{i}") for i in range(AGENTS)}
            tokens["thrifty"] = gateway.issue_token("thrifty", token_budget=budget)

            async def call(agent: str, text: str, max_tokens: int) -> httpx.Response:
                headers = {"authorization": f"Bearer {tokens[agent]}"}
                async with httpx.AsyncClient(
                    base_url=gateway.base_url, headers=headers, timeout=300
                ) as http:
                    response = await http.post("/chat/completions", json=chat(text, max_tokens))
                if response.status_code == 200:
                    usage = response.json()["usage"]
                    tally = reported.setdefault(agent, Counter())
                    tally["calls"] += 1
                    tally["prompt"] += usage["prompt_tokens"]
                    tally["completion"] += usage["completion_tokens"]
                else:
                    statuses[response.json()["error"]["code"]] += 1
                return response

            async def agent_calls(agent: str) -> None:
                for turn in range(CALLS_PER_AGENT):
                    response = await call(agent, f"{agent}, turn {turn}: say hello.", 12)
                    assert response.status_code == 200, response.text

            async def thrifty_bursts() -> None:
                for _ in range(20):
                    async with anyio.create_task_group() as burst:
                        for i in range(3):
                            burst.start_soon(call, "thrifty", f"Thrifty {i}: count to ten.", 8)
                    if statuses["model_use_ended"]:
                        return

            async with anyio.create_task_group() as everyone:
                for agent in [name for name in tokens if name != "thrifty"]:
                    everyone.start_soon(agent_calls, agent)
                everyone.start_soon(thrifty_bursts)
            after = await call("thrifty", "One more, please.", 8)
            summary = gateway.usage_summary()
        await writer.complete()

    assert after.status_code == 403 and after.json()["error"]["code"] == "model_use_ended"
    assert statuses["budget_reserved"] >= 1, statuses  # calls in flight held the budget
    recorded: dict[str, Counter[str]] = {}
    for event in ledger.events:
        if isinstance(event, AgentModelUsage):
            tally = recorded.setdefault(event.agent, Counter())
            tally["calls"] += 1
            tally["prompt"] += event.prompt_tokens or 0
            tally["completion"] += event.completion_tokens or 0
    assert recorded == reported
    for agent, tally in reported.items():
        usage = summary.agents[agent]
        assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (
            tally["calls"],
            tally["prompt"],
            tally["completion"],
        ), agent
    assert all(reported[f"agent-{i}"]["calls"] == CALLS_PER_AGENT for i in range(AGENTS))
    [reached] = [e for e in ledger.events if isinstance(e, AgentModelBudgetReached)]
    spent = reported["thrifty"]["prompt"] + reported["thrifty"]["completion"]
    assert reached.agent == "thrifty" and reached.used_tokens == spent <= budget
    assert summary.agents["thrifty"].ended_by == "token_budget"


def test_the_local_model_is_sized_from_the_roster_and_the_machine() -> None:
    assert local_model_slots(1, 2048) == 1
    assert local_model_slots(3, 2048) == 3
    assert 1 <= local_model_slots(1000, 2048) <= SLOTS_PER_CORE * len(os.sched_getaffinity(0))
    assert local_model_slots(1000, 2**40) == 1  # a context no memory holds twice: one slot


def test_the_local_models_threads_are_half_the_cores_unless_the_environment_sets_them() -> None:
    assert local_model_threads({}) == max(1, (os.cpu_count() or 2) // 2)
    assert local_model_threads({THREADS_NAME: "2"}) == 2
    for bad in ("0", "-1", "two"):
        with pytest.raises(LocalModelError) as raised:
            local_model_threads({THREADS_NAME: bad})
        assert raised.value.reason == "bad-threads" and THREADS_NAME in str(raised.value)
