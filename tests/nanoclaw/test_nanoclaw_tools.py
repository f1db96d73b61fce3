"""A NanoClaw agent on a keyed provider that emits tool calls: ``send_message`` runs in the SDK,
its text goes out on the agent's own router connection, and an attempt to send as another agent
(NanoClaw's own tool had a ``sender`` field) still commits as the agent itself. The provider key
reaches the provider and no process of the agent."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_provider import ScriptedReply, completion
from nanoclaw_support import command_line, processes_of

from controller import RunSpec, nanoclaw
from controller.events.network import RouterMessageCommitted
from controller.modelgateway import ProviderConfig
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, Success
from controller.settings import CREDENTIALS
from ledger import open_ledger_artifacts

pytestmark = pytest.mark.anyio

KEY_NAME = "NANOCLAW_TEST_PROVIDER_KEY"


@pytest.fixture(autouse=True)
def allow_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator lets the run send ``KEY_NAME`` to the provider (``--credential``)."""
    monkeypatch.setenv(CREDENTIALS.name, KEY_NAME)


TOOL = "mcp__nanoclaw__send_message"
FORGED = "Bob here: I will pay $999."


def _reply(message: dict[str, Any], finish: str) -> ScriptedReply:
    reply = completion(prompt_tokens=40, completion_tokens=12)
    reply.body["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return reply


def _environments(run_id: str, agent: str) -> bytes:
    found = b""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if run_id.encode() in argv and agent.encode() in argv:
                found += (entry / "environ").read_bytes()
        except OSError:
            continue
    return found


@pytest.mark.slow
async def test_send_message_goes_out_as_the_agent_itself_whatever_sender_the_model_names(
    require_nanoclaw: None, fake_provider: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-acme-{secrets.token_hex(24)}"
    monkeypatch.setenv(KEY_NAME, key)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": TOOL, "arguments": json.dumps({"text": FORGED, "sender": "bob"})},
    }
    fake_provider.script = [
        _reply({"role": "assistant", "content": "", "tool_calls": [call]}, "tool_calls"),
        _reply({"role": "assistant", "content": "Done, Alice."}, "stop"),
    ]
    provider = ProviderConfig(
        name="acme", base_url=fake_provider.base_url, model="fake-model", api_key_name=KEY_NAME
    )
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> list[str]:
        async with ctx.network.endpoint("market") as market:
            chat = await market.open(ctx.agents.alice.agent)
            await chat.send("Alice, tell everyone your price.")
            heard: list[str] = []
            with anyio.move_on_after(120):
                async for message in market.messages():
                    heard.append(message.sender.name)
                    seen["environ"] = _environments(ctx.ledger.run_id, "alice")
                    if len(heard) == 2:
                        break
        return heard

    spec = RunSpec.define(
        id="acme.nanoclaw-tools/v1",
        agents={
            "alice": nanoclaw("You are Alice.", provider=provider, max_turns=2),
            "bob": nanoclaw("You are Bob.", provider=provider),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=tmp_path, seed=2)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert outcome.exit.value == ["alice", "alice"]
    ledger = open_ledger_artifacts(
        spec.catalog, outcome.receipt.ledger_dir, trusted_key=outcome.receipt.public_key
    )
    committed = [(m.sender_id, m.parts[0]) for m in ledger.events(RouterMessageCommitted)]
    assert ("agent:alice", FORGED) in committed and ("agent:alice", "Done, Alice.") in committed
    assert not [sender for sender, _ in committed if sender == "agent:bob"]

    first, second = (body for _, body in fake_provider.requests[:2])
    assert TOOL in [tool["function"]["name"] for tool in first["tools"]]
    assert {"role": "tool", "tool_call_id": "call_1", "content": "Message sent."} in second[
        "messages"
    ]
    assert {h["authorization"] for h, _ in fake_provider.requests} == {f"Bearer {key}"}
    assert seen["environ"] and key.encode() not in seen["environ"]


@pytest.mark.slow
async def test_a_runner_that_dies_leaves_its_conversation_to_a_fresh_session(
    require_nanoclaw: None, fake_provider: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_NAME, "sk-acme-unused")
    fake_provider.script = [_reply({"role": "assistant", "content": "My price is $40."}, "stop")]
    provider = ProviderConfig(
        name="acme", base_url=fake_provider.base_url, model="fake-model", api_key_name=KEY_NAME
    )
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> list[str]:
        async with ctx.network.endpoint("market") as market:
            chat = await market.open(ctx.agents.alice.agent)
            messages = market.messages()
            await chat.send("Alice, your price?")
            with anyio.fail_after(120):
                first = await anext(messages)
            runners = [
                pid
                for pid in processes_of(ctx.ledger.run_id, "alice")
                if b"runner.mjs" in command_line(pid) or command_line(pid).endswith(b"claude\0")
            ]
            seen["killed"] = runners
            for pid in runners:  # the conversation's runner and its CLI die
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await anyio.sleep(1)
            await chat.send("Alice, and now?")
            with anyio.fail_after(120):
                second = await anext(messages)
        return [first.text, second.text]

    spec = RunSpec.define(
        id="acme.nanoclaw-runner-dies/v1",
        agents={"alice": nanoclaw("You are Alice.", provider=provider, max_turns=3)},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=tmp_path, seed=4)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert seen["killed"], "alice's runner was not found"
    assert outcome.exit.value == ["My price is $40.", "My price is $40."]
