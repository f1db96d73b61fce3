"""Slice 1 of the OpenClaw runtime: a real ``openclaw gateway run`` under the project's install
answers its WebSocket RPC, refuses a wrong token, and replies through the run's model gateway."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute
from openclaw_support import RecordingLedger

from agent_images.model_relay import OPENAI_COMPLETIONS, ModelRelay
from agent_images.openclaw.process import free_loopback_port, openclaw_gateway, wait_ready
from controller.modelgateway.events import AgentModelUsage
from controller.modelgateway.gateway import ModelGateway
from controller.platforms.local_model import LocalModelServer
from society_sandbox.runtimes.openclaw import WORKSPACE_DIR, AgentOptions, openclaw_config
from society_sandbox.runtimes.openclaw_rpc import OpenClawRPCError, open_rpc

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_a_real_openclaw_gateway_answers_its_rpc_with_our_model_gateway_behind_it(
    require_openclaw: None, require_llama_cpp: None, tmp_path: Path
) -> None:
    ledger = RecordingLedger()
    (tmp_path / WORKSPACE_DIR).mkdir()
    (tmp_path / WORKSPACE_DIR / "IDENTITY.md").write_text("You are Alice. You sell a bike.\n")
    async with (
        LocalModelServer(n_ctx=4096) as server,
        ModelGateway([server.provider()], ledger=ledger, credentials=server.credentials) as gw,
        await anyio.create_tcp_listener(local_host="127.0.0.1") as relay_listener,
        anyio.create_task_group() as tasks,
    ):
        relay = ModelRelay(gw.base_url, gw.issue_token("alice"), api=OPENAI_COMPLETIONS)
        tasks.start_soon(relay_listener.serve, relay.serve)
        relay_port = relay_listener.extra(SocketAttribute.local_port)
        port, token = free_loopback_port(), secrets.token_urlsafe(24)
        config = openclaw_config(
            AgentOptions(),
            workdir=tmp_path,
            port=port,
            token=token,
            model_base_url=f"http://127.0.0.1:{relay_port}/v1",
            model=server.model_id,
        )
        async with openclaw_gateway(tmp_path, config) as process:
            assert await wait_ready(process, port, token, timeout_s=180)
            with pytest.raises(OpenClawRPCError) as refused:
                async with open_rpc("not-" + token, url=f"ws://127.0.0.1:{port}/"):
                    pass
            assert refused.value.reason == "unauthorized"

            async with open_rpc(token, url=f"ws://127.0.0.1:{port}/") as rpc:
                assert rpc.hello["server"]["version"] == "2026.9.6"
                assert {"agent", "agent.wait"} <= set(rpc.methods)
                run_id = await rpc.agent("Hello Alice, what price for the bike?", session_key="c1")
                ended = await rpc.agent_wait(run_id, timeout_s=400)
            assert process.returncode is None
        tasks.cancel_scope.cancel()
        await relay.aclose()

    assert ended["status"] == "ok", ended
    reply = ended["terminalReply"]["text"]
    assert reply.strip()
    usage = [e for e in ledger.events if isinstance(e, AgentModelUsage)]
    assert usage and usage[0].agent == "alice" and relay.calls == len(usage)
    assert (usage[0].prompt_tokens or 0) > 500  # OpenClaw's own prompt, not ours
