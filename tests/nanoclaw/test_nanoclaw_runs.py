"""A whole local run of a mixed society: NanoClaw agent alice and OpenClaw agent bob in one
conversation, each in its own sandbox. Alice's owner reaches her over NanoClaw's contract on the
bridge; her social traffic is sent by her own router connection, her model calls are measured by
the run's one model gateway (which OpenClaw shares), and no key is anywhere in her processes.

One run serves the tests of this module (one to three minutes here: OpenClaw's turns are slow)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from nanoclaw_support import processes_of

from controller import RunSpec, nanoclaw, openclaw
from controller.agents.nanoclaw import (
    NanoClawAgentConfigured,
    NanoClawOwner,
    NanoClawOwnerError,
)
from controller.events.network import RouterMessageCommitted
from controller.events.run import AgentRuntimeReady
from controller.modelgateway.events import AgentModelUsage, ModelGatewayStarted
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, Success
from ledger import LedgerArtifacts, open_ledger_artifacts, verify_ledger
from society_sandbox.runtimes.openclaw import openclaw_executable

pytestmark = pytest.mark.anyio


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def _executable(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


async def _raw_owner(owner: NanoClawOwner, lines: list[bytes]) -> bytes:
    """Send ``lines`` on one raw bridge connection; everything it answers until it closes."""
    stream = await owner._connect()
    received = b""
    async with stream:
        for line in lines:
            await stream.send(line)
        with anyio.fail_after(30):
            try:
                while True:
                    received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return received


async def _one_run(artifact_root: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> dict[str, Any]:
        alice, bob = ctx.agents.alice, ctx.agents.bob
        owner = alice.owner
        assert isinstance(owner, NanoClawOwner)
        seen["hello"] = await owner.hello()
        async with owner.session("Say hello to the owner in one short sentence.") as session:
            seen["result"] = await session.result(timeout_s=240)
            processes = processes_of(ctx.ledger.run_id, "alice")
            seen["environments"] = {pid: _environ(pid) for pid in processes}
            seen["executables"] = {pid: _executable(pid) for pid in processes}
            run_dir = Path(ctx.ledger.receipt().ledger_dir).parents[1]
            secrets = run_dir / "sandboxes" / "alice" / "work" / ".society" / "secrets.json"
            seen["gateway_token"] = json.loads(secrets.read_bytes())["credentials"][
                "MODEL_GATEWAY_TOKEN"
            ]
        wrong = NanoClawOwner(
            "not-the-bridge-token", unix_path=owner._unix_path, host=owner._host, port=owner._port
        )
        with pytest.raises(NanoClawOwnerError) as refused:
            await wrong.hello()
        seen["wrong"] = refused.value.reason
        token = json.dumps({"token": owner._token}).encode() + b"\n"
        seen["malformed"] = await _raw_owner(owner, [token, b"[" * 50 + b"\n"])
        seen["no_prompt"] = await _raw_owner(owner, [token, b'{"type": "message"}\n'])
        seen["after_malformed"] = await owner.hello()
        async with ctx.network.endpoint("market") as market:
            chat = await market.open(alice.agent, bob.agent)
            await chat.send("Alice sells a bike, Bob wants it. Alice, your price? Bob, yours?")
            heard: list[tuple[str, str]] = []
            with anyio.move_on_after(420):
                async for message in market.messages():
                    heard.append((message.sender.name, message.text))
                    if {name for name, _ in heard} == {"alice", "bob"}:
                        break
        return {"heard": heard}

    spec = RunSpec.define(
        id="acme.nanoclaw-test/v1",
        agents={
            "alice": nanoclaw("You are Alice. You sell a bike for $300. Answer in one sentence."),
            "bob": openclaw(
                "You are Bob. You buy a bike for $200. Answer in one sentence.", max_turns=1
            ),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=5)
    return {"spec": spec, "outcome": outcome, "seen": seen}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, require_nanoclaw: None) -> Any:
    if not openclaw_executable().is_file():
        message = "OpenClaw is not installed; run scripts/install-openclaw.sh"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI must run the mixed society)")
        pytest.skip(message)
    root = tmp_path_factory.mktemp("artifacts")
    return anyio.run(_one_run, root) | {"root": root}


def _ledger(run: dict[str, Any]) -> LedgerArtifacts:
    outcome = run["outcome"]
    assert isinstance(outcome, ProgramFinished), outcome
    return open_ledger_artifacts(
        run["spec"].catalog,
        outcome.receipt.ledger_dir,
        expected_definition_id=run["spec"].id,
        trusted_key=outcome.receipt.public_key,
    )


@pytest.mark.slow
def test_the_owner_prompts_a_nanoclaw_agent_and_reads_its_result_over_nanoclaws_contract(
    finished_run: dict[str, Any],
) -> None:
    seen = finished_run["seen"]
    assert seen["hello"]["sdkVersion"] == "0.3.333"
    result = seen["result"]
    assert result.status == "success" and result.result and result.result.strip()
    assert result.new_session_id  # the SDK's own session


@pytest.mark.slow
def test_a_wrong_bridge_token_is_refused_and_a_malformed_frame_ends_only_its_connection(
    finished_run: dict[str, Any],
) -> None:
    seen = finished_run["seen"]
    assert seen["wrong"] == "unauthorized"
    for answer in (seen["malformed"], seen["no_prompt"]):
        hello, _, rest = answer.partition(b"\n")
        assert json.loads(hello)["ok"] is True
        start, block, end = rest.strip().split(b"\n")
        assert (start, end) == (b"---NANOCLAW_OUTPUT_START---", b"---NANOCLAW_OUTPUT_END---")
        assert json.loads(block)["status"] == "error"
    assert seen["after_malformed"]["ok"] is True  # the agent still answers


@pytest.mark.slow
def test_a_nanoclaw_and_an_openclaw_agent_converse_keyless_and_the_router_commits_each_reply(
    finished_run: dict[str, Any],
) -> None:
    outcome = finished_run["outcome"]
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    heard = outcome.exit.value["heard"]
    assert {name for name, _ in heard} == {"alice", "bob"}, heard
    ledger = _ledger(finished_run)
    ready = {e.agent: e.runtime for e in ledger.events(AgentRuntimeReady)}
    assert ready == {"alice": "nanoclaw", "bob": "openclaw"}
    committed = {(m.sender_id, m.parts[0]) for m in ledger.events(RouterMessageCommitted)}
    for name, text in heard:
        assert (f"agent:{name}", text) in committed
    usage = {u.agent for u in ledger.events(AgentModelUsage)}
    assert usage == {"alice", "bob"}
    configured = {e.agent: e.sdk_version for e in ledger.events(NanoClawAgentConfigured)}
    assert configured == {"alice": "0.3.333"}
    [started] = ledger.events(ModelGatewayStarted)  # one gateway, one local model for both
    assert started.agents.keys() == {"alice", "bob"} and len(started.providers) == 1
    verify_ledger(finished_run["spec"].catalog, outcome.receipt.ledger_dir)


@pytest.mark.slow
def test_no_process_of_a_nanoclaw_agent_holds_a_key_or_its_gateway_token(
    finished_run: dict[str, Any],
) -> None:
    seen = finished_run["seen"]
    environments: dict[int, dict[str, str]] = seen["environments"]
    clis = [pid for pid, exe in seen["executables"].items() if exe.endswith("/claude")]
    assert clis, seen["executables"]
    for pid in clis:
        env = environments[pid]
        assert env["ANTHROPIC_API_KEY"] == "relay"
        assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    for env in environments.values():
        assert not {"SOCIETY_LOCAL_MODEL_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN"} & set(env)
        keys = {name: value for name, value in env.items() if name.endswith("_API_KEY")}
        assert set(keys.values()) <= {"relay"}, keys
        assert seen["gateway_token"] not in "\0".join(env.values())  # only the relay holds it
