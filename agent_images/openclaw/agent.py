"""The OpenClaw agent program: OpenClaw's own gateway, plus an adapter that joins it to the router.

Inside the sandbox it

1. starts the model relay on loopback (OpenClaw's provider ``baseUrl``; it adds the agent's gateway
   token and reaches the run's model gateway through ``MODEL_GATEWAY_SOCKET``);
2. writes OpenClaw's config (loopback gateway, token auth with the bridge token, the options in
   ``openclaw-agent.json``) and runs ``openclaw gateway run``, unpatched;
3. once OpenClaw answers, connects to the router with its router token and opens its bridge
   socket: each bridge connection is spliced to OpenClaw's gateway port, so the controller speaks
   OpenClaw's own RPC, authenticated by OpenClaw's own token check;
4. turns every delivered message into an OpenClaw ``agent`` run in one session per conversation
   (``agent.wait`` gives the reply), and sends the reply back in that conversation.

The adapter is a process, not a channel plugin: it needs no code inside OpenClaw, holds the router
credential itself, and drives OpenClaw only through the RPC any operator client uses.

Exit codes: 0 when the router ends the run; 1 when OpenClaw or the router failed; 2 when the
sandbox was not set up as the boot contract says.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, SocketListener

from agent_images.model_relay import OPENAI_COMPLETIONS, ModelRelay
from agent_images.openclaw.bridge import pipe
from agent_images.openclaw.process import free_loopback_port, openclaw_gateway, wait_ready
from agent_images.router_session import connect_router, run_agent, say, stop_on_signal
from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.runtimes.llm import (
    GATEWAY_SOCKET_VARIABLE,
    GATEWAY_TOKEN_CREDENTIAL,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
)
from society_sandbox.runtimes.openclaw import AGENT_CONFIG_FILE, AgentOptions, openclaw_config
from society_sandbox.runtimes.openclaw_rpc import OpenClawRPC, OpenClawRPCError, open_rpc

PROGRAM = "openclaw agent"
READY_TIMEOUT_S = 240.0


class OpenClawEnded(Exception):
    """OpenClaw's gateway process ended while the agent still needed it."""


async def run(config: BootConfig, options: AgentOptions, workdir: Path) -> int:
    secrets = Secrets.read(config.secrets_file)
    base_url, model = os.environ.get(GATEWAY_URL_VARIABLE), os.environ.get(MODEL_VARIABLE)
    token = secrets.credentials.get(GATEWAY_TOKEN_CREDENTIAL)
    if not base_url or not model or not token:
        raise BootError(
            f"the sandbox lacks {GATEWAY_URL_VARIABLE}, {MODEL_VARIABLE} or the "
            f"{GATEWAY_TOKEN_CREDENTIAL} credential; the run's model service grants them"
        )
    relay = ModelRelay(
        base_url, token, api=OPENAI_COMPLETIONS, unix_socket=os.environ.get(GATEWAY_SOCKET_VARIABLE)
    )
    port = free_loopback_port()
    bridge = await SocketListener.from_socket(config.bridge_socket())
    code = 0  # a signal ends the agent cleanly
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as relay_listener,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(relay_listener.serve, relay.serve)
        relay_port = relay_listener.extra(anyio.abc.SocketAttribute.local_port)
        settings = openclaw_config(
            options,
            workdir=workdir,
            port=port,
            token=secrets.bridge_token,
            model_base_url=f"http://127.0.0.1:{relay_port}/v1",
            model=model,
        )
        async with openclaw_gateway(workdir, settings) as process:
            tasks.start_soon(stop_on_signal, tasks.cancel_scope.cancel)
            code = await _adapt(config, secrets, options, process, port, bridge)
        tasks.cancel_scope.cancel()
    await relay.aclose()
    return code


async def _adapt(
    config: BootConfig,
    secrets: Secrets,
    options: AgentOptions,
    process: Process,
    port: int,
    bridge: SocketListener,
) -> int:
    if not await wait_ready(process, port, secrets.bridge_token, timeout_s=READY_TIMEOUT_S):
        say(PROGRAM, f"OpenClaw's gateway exited ({process.returncode}) before it answered")
        return 1
    failure: str | None = None
    try:
        async with (
            open_rpc(secrets.bridge_token, url=f"ws://127.0.0.1:{port}/") as rpc,
            connect_router(config, secrets) as session,
            anyio.create_task_group() as tasks,
        ):

            async def splice() -> None:
                async with bridge:
                    await bridge.serve(lambda client: pipe(client, "127.0.0.1", port))

            async def watch_openclaw() -> None:
                await process.wait()
                raise OpenClawEnded(f"OpenClaw's gateway exited ({process.returncode})")

            tasks.start_soon(splice)
            tasks.start_soon(watch_openclaw)
            await _converse(session, rpc, options)
            tasks.cancel_scope.cancel()
    except* OpenClawEnded as ended:
        failure = str(ended.exceptions[0])
    except* (OpenClawRPCError, ConnectionError) as failed:
        failure = f"{type(failed.exceptions[0]).__name__}: {failed.exceptions[0]}"
    if failure is not None:
        say(PROGRAM, failure)
        return 1
    say(PROGRAM, "the router stopped delivering: the run is over")
    return 0


async def _converse(session: Any, rpc: OpenClawRPC, options: AgentOptions) -> None:
    """One OpenClaw session per conversation. What arrived while a turn ran is answered together
    in one ``agent`` run; its reply goes back in the same conversation, until ``max_turns``
    replies are spent (then the agent only listens)."""
    send, inbox = anyio.create_memory_object_stream[Any](1024)

    async def receive() -> None:
        async with send:
            async for delivery in session.deliveries():
                await send.send(delivery)

    replies = 0
    async with anyio.create_task_group() as tasks, inbox:
        tasks.start_soon(receive)
        async for first in inbox:
            batch = [first, *_drain(inbox)]
            by_conversation: dict[str, list[Any]] = {}
            for delivery in batch:
                by_conversation.setdefault(delivery.conversation_id, []).append(delivery)
            for conversation_id, heard in by_conversation.items():
                if replies >= options.max_turns:
                    continue
                text = "\n".join(f"{d.sender.name} says: {d.text}" for d in heard)
                run_id = await rpc.agent(text, session_key=f"society-{conversation_id}")
                ended = await rpc.agent_wait(run_id, timeout_s=options.timeout_s)
                reply = str((ended.get("terminalReply") or {}).get("text") or "").strip()
                if ended.get("status") != "ok" or not reply:
                    say(PROGRAM, f"OpenClaw run {run_id} gave no reply: {json.dumps(ended)[:300]}")
                    continue
                await session.send(conversation_id, reply[:4000])
                replies += 1
        tasks.cancel_scope.cancel()


def _drain(inbox: Any) -> list[Any]:
    items = []
    while True:
        try:
            items.append(inbox.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            return items


def main() -> None:
    run_agent(PROGRAM, _start)


def _start(config: BootConfig, workdir: Path) -> int:
    options = AgentOptions.model_validate_json((workdir / AGENT_CONFIG_FILE).read_bytes())
    return anyio.run(run, config, options, workdir)
