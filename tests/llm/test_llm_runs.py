"""Whole runs of llm agents on the local profile: the real local model, a fake keyed provider,
budgets and the owner API. Every model call goes through the run's gateway."""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest
from llm_support import (
    agent_pid,
    environment_of,
    every_file,
    model_servers_of_this_process,
    usage_from_events,
    verified,
)

from controller import RunSpec
from controller.agents import Completed
from controller.agents.llm import LLMAgentConfigured, LLMAgentStopped, LLMRuntime, llm
from controller.events.network import RouterMessageCommitted
from controller.events.run import AgentRuntimeCompleted, AgentRuntimeReady
from controller.modelgateway import ProviderConfig
from controller.modelgateway.events import (
    AgentModelBudgetReached,
    AgentModelUsage,
    ModelGatewayStarted,
)
from controller.modelgateway.pricing import SMOLLM2_MODEL_ID
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, RunResult, Success
from controller.settings import CREDENTIALS
from society_sandbox.runtimes.llm import Budget, ReplyPolicy

pytestmark = pytest.mark.anyio

KEY_NAME = "ACME_LLM_API_KEY"


@pytest.fixture(autouse=True)
def allow_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator lets the run send ``KEY_NAME`` to the provider (``--credential``)."""
    monkeypatch.setenv(CREDENTIALS.name, KEY_NAME)


def keyed(fake: Any, **changes: Any) -> LLMRuntime:
    """An llm agent on the fake provider, whose key the controller holds under ``KEY_NAME``."""
    provider = ProviderConfig(
        name="acme", base_url=fake.base_url, model="fake-model", api_key_name=KEY_NAME
    )
    return llm("You are a terse test agent.", provider=provider, **changes)


def spec_of(execute: Any, **agents: LLMRuntime) -> RunSpec:
    return RunSpec.define(id="acme.llm-test/v1", agents=agents, execute=execute)


@pytest.mark.slow
async def test_the_real_local_model_drives_a_two_agent_conversation_through_the_gateway(
    require_llama_cpp: None, artifact_root: Path
) -> None:
    talk = {
        "budget": Budget(max_turns=2, max_wall_s=120),
        "reply": ReplyPolicy(max_reply_tokens=32),
    }

    servers: list[int] = []

    async def execute(ctx: RunContext) -> list[str]:
        servers.extend(model_servers_of_this_process())
        heard = []
        async with ctx.network.endpoint("host") as host:
            chat = await host.open(ctx.agents.alice.agent, ctx.agents.bob.agent)
            await chat.send("Alice and Bob: pick a name for the new cafe together.")
            with anyio.fail_after(150):
                async with anyio.create_task_group() as listening:

                    async def listen() -> None:
                        async for message in host.messages():
                            heard.append(message.sender.name)

                    listening.start_soon(listen)
                    for handle in ctx.agents.values():
                        assert isinstance(await handle.termination, Completed)
                    listening.cancel_scope.cancel()
        return heard

    spec = spec_of(
        execute,
        alice=llm("You are Alice, a cheerful baker.", **talk),
        bob=llm("You are Bob, a careful accountant.", **talk),
    )
    outcome = await Run.execute(
        spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=11
    )
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    ledger = verified(spec, outcome)

    spoken = [m.sender_id for m in ledger.events(RouterMessageCommitted)]
    assert {"agent:alice", "agent:bob"} <= set(spoken)
    assert sorted(set(outcome.exit.value)) == ["alice", "bob"]
    started = next(iter(ledger.events(ModelGatewayStarted)))
    [local] = started.providers
    assert local.local and local.model == SMOLLM2_MODEL_ID
    assert started.agents == {"alice": SMOLLM2_MODEL_ID, "bob": SMOLLM2_MODEL_ID}
    configured = {e.agent: e for e in ledger.events(LLMAgentConfigured)}
    assert configured.keys() == {"alice", "bob"}
    assert configured["alice"].context.truncation == "keep-last"
    stopped = {e.agent: e for e in ledger.events(LLMAgentStopped)}
    assert {agent: s.reason for agent, s in stopped.items()} == dict.fromkeys(
        ("alice", "bob"), "turn-budget"
    )

    # The gateway's events are the usage; they sum to the result's summary, per agent and total.
    result = RunResult.from_outcome(outcome)
    assert result.usage is not None
    summed = usage_from_events(ledger)
    for agent in ("alice", "bob"):
        reported = result.usage["agents"][agent]
        assert summed[agent]["calls"] == reported["calls"] == 2
        for key in ("promptTokens", "completionTokens", "costUsd"):
            assert summed[agent][key] == reported[key]
        assert stopped[agent].prompt_tokens == reported["promptTokens"] > 0
    total = result.usage["total"]
    assert total["calls"] == 4 and total["costUsd"] == 0.0
    assert total["completionTokens"] == sum(s["completionTokens"] for s in summed.values())
    assert json.loads(result.model_dump_json())["usage"] == result.usage
    log = (artifact_root / ledger.run_id / "model-server.log").read_text()
    assert log.count("stop processing") == 4  # a slot per agent: llama.cpp's parallel server
    assert len(servers) == 1, "one model server serves the run's agents"
    assert model_servers_of_this_process() == [], "the model server outlived its run"


async def test_the_provider_key_appears_nowhere_but_the_providers_requests(
    fake_provider: Any,
    artifact_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = f"sk-acme-{secrets.token_hex(24)}"
    monkeypatch.setenv(KEY_NAME, key)
    caplog.set_level(logging.DEBUG)
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> None:
        run_dir = Path(ctx.ledger.receipt().ledger_dir).parents[1]
        for name in ctx.agents:
            seen[f"{name} environment"] = environment_of(agent_pid(ctx.ledger.run_id, name))
            secrets_file = run_dir / "sandboxes" / name / "work" / ".society" / "secrets.json"
            seen[f"{name} secrets"] = secrets_file.read_bytes()
        await ctx.agents.alice.owner.instruct("Greet Bob.", peers=["bob"])
        with anyio.fail_after(30):
            assert isinstance(await ctx.agents.alice.termination, Completed)
        seen["bob state"] = await ctx.agents.bob.owner.state()
        await ctx.agents.bob.owner.stop()
        with anyio.fail_after(10):
            await ctx.agents.bob.termination

    spec = spec_of(
        execute,
        alice=keyed(fake_provider, budget=Budget(max_turns=2)),
        bob=keyed(fake_provider, budget=Budget(max_turns=5)),
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    ledger = verified(spec, outcome)

    assert fake_provider.requests, "the agents never reached the provider"
    assert {h["authorization"] for h, _ in fake_provider.requests} == {f"Bearer {key}"}
    for name in ("alice", "bob"):
        assert key.encode() not in seen[f"{name} environment"]
        assert b"MODEL_GATEWAY_URL=" in seen[f"{name} environment"]
        assert b"MODEL_GATEWAY_TOKEN=" not in seen[f"{name} environment"]
        credentials = json.loads(seen[f"{name} secrets"])["credentials"]
        assert list(credentials) == ["MODEL_GATEWAY_TOKEN"]
        assert key not in credentials["MODEL_GATEWAY_TOKEN"]
    run_files = every_file(artifact_root / ledger.run_id)
    assert any(path.name == "output.log" for path in run_files)  # the agents' harvested logs
    assert [path for path, data in run_files.items() if key.encode() in data] == []
    assert key not in caplog.text
    assert key not in os.environ.get("SOCIETY_SECRETS_FILE", "")

    [provider] = next(iter(ledger.events(ModelGatewayStarted))).providers
    assert (provider.name, provider.api_key_name, provider.local) == ("acme", KEY_NAME, False)
    ready = {e.agent: e for e in ledger.events(AgentRuntimeReady)}
    assert ready["alice"].environment == ["MODEL_GATEWAY_URL", "MODEL_NAME"]
    stopped = {e.agent: e.reason for e in ledger.events(LLMAgentStopped)}
    assert stopped == {"alice": "turn-budget", "bob": "owner"}
    assert seen["bob state"]["usage"]["tokens"] == 18 * seen["bob state"]["turns"] > 0
    assert seen["bob state"]["context"]["truncation"] == "keep-last"


async def test_an_agent_that_reaches_its_token_budget_stops_and_says_why(
    fake_provider: Any, artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_NAME, "sk-acme-budget-test")

    async def execute(ctx: RunContext) -> int:
        alice = ctx.agents.alice
        replies = 0
        async with ctx.network.endpoint("host") as host:
            chat = await host.open(alice.agent)
            messages = host.messages()

            async def count_replies() -> None:
                nonlocal replies
                async for _ in messages:
                    replies += 1
                    await chat.send(f"ping {replies}")

            with anyio.fail_after(30):
                async with anyio.create_task_group() as pinging:
                    pinging.start_soon(count_replies)
                    await chat.send("ping 0")
                    await alice.termination
                    pinging.cancel_scope.cancel()
        return replies

    # The gateway forwards a call only while its worst case (a token per request byte, plus
    # max_tokens) fits in what is left; each fake call is then measured at 11 + 7 tokens.
    budget = 1000
    spec = spec_of(
        execute, alice=keyed(fake_provider, budget=Budget(max_tokens=budget, max_turns=90))
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    ledger = verified(spec, outcome)

    usage = list(ledger.events(AgentModelUsage))
    [stopped] = ledger.events(LLMAgentStopped)
    assert (stopped.reason, stopped.turns, stopped.failed) == ("model-use-ended", len(usage), False)
    assert "token budget of 1000 cannot cover another call" in stopped.detail
    assert outcome.exit.value == len(usage) >= 2
    assert (stopped.prompt_tokens, stopped.completion_tokens) == (11 * len(usage), 7 * len(usage))
    [reached] = ledger.events(AgentModelBudgetReached)
    assert (reached.agent, reached.budget_tokens) == ("alice", budget)
    assert reached.used_tokens == 18 * len(usage) <= budget
    [completed] = ledger.events(AgentRuntimeCompleted)
    assert completed.phase == "program"
    result_usage = RunResult.from_outcome(outcome).usage
    assert result_usage is not None
    assert result_usage["agents"]["alice"]["endedBy"] == "token_budget"


async def test_an_agent_stops_at_its_wall_time_budget_counted_from_its_first_message(
    fake_provider: Any, artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_NAME, "sk-acme-wall-test")

    async def execute(ctx: RunContext) -> None:
        alice = ctx.agents.alice
        await anyio.sleep(4.0)  # idle time (longer than its budget) before its first message
        assert not alice.termination.done
        async with ctx.network.endpoint("host") as host:
            chat = await host.open(alice.agent)
            await chat.send("ping")
            with anyio.fail_after(15):
                assert isinstance(await alice.termination, Completed)

    # the budget leaves room for one model call on a loaded machine; the idle wait exceeds it
    spec = spec_of(execute, alice=keyed(fake_provider, budget=Budget(max_wall_s=3.0)))
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    [stopped] = verified(spec, outcome).events(LLMAgentStopped)
    assert (stopped.reason, stopped.turns, stopped.failed) == ("wall-time-budget", 1, False)
