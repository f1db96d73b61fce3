"""The NanoClaw agent program: NanoClaw-style runners behind the agent's own router connection.

Inside the sandbox it

1. starts the model relay on loopback (the CLI's ``ANTHROPIC_BASE_URL``; it adds the agent's
   gateway token and reaches the run's model gateway through ``MODEL_GATEWAY_SOCKET``);
2. connects to the router with its router token (the production client) and opens its bridge
   socket, which speaks NanoClaw's contract to the owner (``bridge``);
3. runs one runner (``runner.mjs``: one open ``query()`` of the Claude Agent SDK) per
   conversation: the first message delivered in it is the session's prompt, each later one a
   follow-up in the same stream; every result, and every ``send_message`` call, is sent in that
   conversation by this program's router connection, until ``max_turns`` are spent (then the
   runners are closed and the agent only listens).

Exit codes: 0 when the router ends the run; 1 when a runner or the router failed; 2 when the
sandbox was not set up as the boot contract says or the runtime is not installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import SocketAttribute, SocketListener

from agent_images.model_relay import ANTHROPIC_MESSAGES, ModelRelay
from agent_images.nanoclaw.bridge import OwnerChannel, serve_owner
from agent_images.nanoclaw.session import (
    RunnerMissing,
    check_installed,
    open_runner,
    runner_environment,
)
from agent_images.router_session import connect_router, run_agent, say, stop_on_signal
from society_sandbox.boot import BootConfig, BootError, Secrets
from society_sandbox.runtimes.llm import (
    GATEWAY_SOCKET_VARIABLE,
    GATEWAY_TOKEN_CREDENTIAL,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
)
from society_sandbox.runtimes.nanoclaw import AGENT_CONFIG_FILE, RUNNER_LOG, AgentOptions

PROGRAM = "nanoclaw agent"
MAX_SENT_CHARS = 4000


class NanoClawAgent:
    """The agent's conversations: one runner each, replies sent on the agent's own session."""

    def __init__(
        self,
        session: Any,
        options: AgentOptions,
        *,
        workdir: Path,
        environment: dict[str, str],
        model: str,
        log: IO[bytes],
    ) -> None:
        self._session = session
        self._options = options
        self._workdir = workdir
        self._environment = environment
        self._model = model
        self._log = log
        self._sent = 0
        self._spent = anyio.Event()

    async def converse(self) -> None:
        """Until the router stops delivering: each conversation to its own runner."""
        inboxes: dict[str, Any] = {}
        async with anyio.create_task_group() as tasks:
            async for delivery in self._session.deliveries():
                if self._spent.is_set():
                    continue
                text = f"{delivery.sender.name} says: {delivery.text}"
                conversation = delivery.conversation_id
                try:
                    await inboxes[conversation].send(text)
                except (KeyError, anyio.BrokenResourceError):
                    # none yet, or its runner ended (an error): a fresh session takes the message
                    inbox, outbox = anyio.create_memory_object_stream[str](256)
                    inboxes[conversation] = inbox
                    tasks.start_soon(self._conversation, conversation, outbox)
                    await inbox.send(text)
            for inbox in inboxes.values():
                inbox.close()
            tasks.cancel_scope.cancel()

    async def _conversation(self, conversation_id: str, heard: Any) -> None:
        async with heard:
            prompt = await heard.receive()
            async with (
                self._runner(prompt) as runner,
                anyio.create_task_group() as tasks,
            ):

                async def feed() -> None:
                    async for text in heard:
                        await runner.follow_up(text)
                    await runner.close()

                async def close_when_spent() -> None:
                    await self._spent.wait()
                    await runner.close()

                tasks.start_soon(feed)
                tasks.start_soon(close_when_spent)
                async for output in runner.outputs():
                    text = _said(output)
                    if text is not None and not self._spent.is_set():
                        await self._session.send(conversation_id, text[:MAX_SENT_CHARS])
                        self._sent += 1
                        if self._sent >= self._options.max_turns:
                            self._spent.set()
                    elif output.get("status") == "error":
                        say(PROGRAM, f"runner error in {conversation_id}: {output.get('error')}")
                tasks.cancel_scope.cancel()

    async def owner_session(self, prompt: str, channel: OwnerChannel) -> None:
        """One owner session over the bridge: its outputs go to the owner, not the router."""
        async with self._runner(prompt) as runner, anyio.create_task_group() as tasks:

            async def feed() -> None:
                while (frame := await channel.frame()) is not None:
                    if frame.get("type") == "close":
                        break
                    text = frame.get("text")
                    if frame.get("type") == "message" and isinstance(text, str) and text:
                        await runner.follow_up(text)
                await runner.close()

            tasks.start_soon(feed)
            async for output in runner.outputs():
                await channel.write(output)
            tasks.cancel_scope.cancel()

    def _runner(self, prompt: str) -> Any:
        return open_runner(
            self._workdir,
            prompt,
            options=self._options,
            environment=self._environment,
            model=self._model,
            log=self._log,
        )


def _said(output: dict[str, Any]) -> str | None:
    """What an output says to the conversation: a ``send_message`` text or a result."""
    sent = output.get("sendMessage")
    text = sent.get("text") if isinstance(sent, dict) else output.get("result")
    if output.get("status") != "success" or not isinstance(text, str) or not text.strip():
        return None
    return text.strip()


async def run(config: BootConfig, options: AgentOptions, workdir: Path, log: IO[bytes]) -> int:
    secrets = Secrets.read(config.secrets_file)
    base_url, model = os.environ.get(GATEWAY_URL_VARIABLE), os.environ.get(MODEL_VARIABLE)
    token = secrets.credentials.get(GATEWAY_TOKEN_CREDENTIAL)
    if not base_url or not model or not token:
        raise BootError(
            f"the sandbox lacks {GATEWAY_URL_VARIABLE}, {MODEL_VARIABLE} or the "
            f"{GATEWAY_TOKEN_CREDENTIAL} credential; the run's model service grants them"
        )
    check_installed()
    relay = ModelRelay(
        base_url, token, api=ANTHROPIC_MESSAGES, unix_socket=os.environ.get(GATEWAY_SOCKET_VARIABLE)
    )
    bridge = await SocketListener.from_socket(config.bridge_socket())
    code = 0
    try:
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as relay_listener,
            connect_router(config, secrets) as session,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(relay_listener.serve, relay.serve)
            port = relay_listener.extra(SocketAttribute.local_port)
            agent = NanoClawAgent(
                session,
                options,
                workdir=workdir,
                environment=runner_environment(workdir, f"http://127.0.0.1:{port}", model, options),
                model=model,
                log=log,
            )

            async def serve_bridge() -> None:
                async with bridge:
                    await bridge.serve(
                        lambda s: serve_owner(s, secrets.bridge_token, agent.owner_session)
                    )

            tasks.start_soon(serve_bridge)
            tasks.start_soon(stop_on_signal, tasks.cancel_scope.cancel)
            await agent.converse()
            say(PROGRAM, "the router stopped delivering: the run is over")
            tasks.cancel_scope.cancel()
    except* ConnectionError as failed:
        say(PROGRAM, f"ConnectionError: {failed.exceptions[0]}")
        code = 1
    await relay.aclose()
    return code


def main() -> None:
    run_agent(PROGRAM, _start, unready=(RunnerMissing,))


def _start(config: BootConfig, workdir: Path) -> int:
    options = AgentOptions.model_validate_json((workdir / AGENT_CONFIG_FILE).read_bytes())
    with open(workdir / RUNNER_LOG, "ab") as log:
        return anyio.run(run, config, options, workdir, log)
