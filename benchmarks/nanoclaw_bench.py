"""The NanoClaw side of ``startup_bench.py --nanoclaw``: bare SDK processes, the first request each
sends, its prompt size in tokens, and the memory each holds.

A bare SDK process is Node running ``query()`` of the pinned Claude Agent SDK with its default
options (the same traffic variables and endpoint as the runtime, nothing trimmed), pointed at a
recording Anthropic endpoint on loopback that notes when each process's first request arrives and
answers it with a short Message. The runtime's own first request is recorded the same way from
``runner.mjs`` with the runtime's trimmed options. Both recorded requests are then counted in
tokens by the run's local model behind the model gateway's Anthropic endpoint (``max_tokens`` 1).
The local model's chat template leaves tool definitions out, so those counts hold the system
prompt and messages only; the request bytes show what the tool definitions add.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from agent_images.nanoclaw.session import open_runner, runner_environment
from controller.modelgateway.anthropic_stream import as_event_stream, as_message
from society_sandbox.runtimes.nanoclaw import (
    RUNNER_SCRIPT,
    AgentOptions,
    claude_code_executable,
    node_executable,
)

BARE_SDK = """
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
const modules = process.env.SOCIETY_NANOCLAW_MODULES;
const entry = join(modules, '@anthropic-ai/claude-agent-sdk/sdk.mjs');
const sdk = await import(pathToFileURL(entry).href);
for await (const m of sdk.query({ prompt: 'Bea says: what is your price for the bike?', options: {
  pathToClaudeCodeExecutable: process.env.CLAUDE_CODE_PATH, env: process.env,
  model: process.env.ANTHROPIC_MODEL, cwd: process.cwd() } })) {
  if (m.type === 'result') break;
}
"""
MODEL = "smollm2-135m-instruct"


@dataclass
class RecordingEndpoint:
    """Notes each client's first ``POST /v1/messages`` (by its key) and answers a short Message."""

    first: dict[str, float] = field(default_factory=dict)
    bodies: dict[str, bytes] = field(default_factory=dict)
    arrived: dict[str, anyio.Event] = field(default_factory=dict)

    async def wait_first(self, key: str) -> None:
        await self.arrived.setdefault(key, anyio.Event()).wait()

    async def serve(self, stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            try:
                head = (await reader.receive_until(b"\r\n\r\n", 65536)).decode("latin-1")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in head.split("\r\n")[1:])
                }
                length = int(headers.get("content-length") or 0)
                body = await reader.receive_exactly(length) if length else b""
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
                return
            key = headers.get("x-api-key", "")
            if head.startswith("POST /v1/messages") and key not in self.first:
                self.first[key] = time.perf_counter()
                self.bodies[key] = body
                self.arrived.setdefault(key, anyio.Event()).set()
            answer = self._answer(body)
            await stream.send(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                + f"content-length: {len(answer)}\r\nconnection: close\r\n\r\n".encode()
                + answer
            )

    def _answer(self, body: bytes) -> bytes:
        completion = {
            "choices": [{"message": {"content": "Two hundred."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2},
        }
        message = as_message(completion, message_id="msg_bench", model=MODEL)
        try:
            streamed = json.loads(body).get("stream") is True
        except ValueError:
            streamed = False
        return as_event_stream(message) if streamed else json.dumps(message).encode()


def _environment(workdir: Path, port: int, key: str) -> dict[str, str]:
    environment = runner_environment(
        workdir, f"http://127.0.0.1:{port}", MODEL, AgentOptions(identity="bench")
    )
    return environment | {
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_PATH": str(claude_code_executable()),
    }


def _peak_rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = [pid], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _kill(pids: list[int]) -> None:
    """SIGKILL a bare process tree this benchmark started (Node and the CLI it spawned)."""
    for pid in reversed(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def bare_sdk_first_requests(agents: int) -> dict[str, Any]:
    """``agents`` bare SDK processes started at once: seconds until each sent its first request,
    and the peak memory of each process tree (Node host plus CLI) at that moment."""
    endpoint = RecordingEndpoint()
    with tempfile.TemporaryDirectory(
        prefix="nanoclaw-bare-", ignore_cleanup_errors=True
    ) as scratch:
        script = Path(scratch) / "bare.mjs"
        script.write_text(BARE_SDK)
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(listener.serve, endpoint.serve)
            port = listener.extra(SocketAttribute.local_port)
            memory: list[float] = []
            started = time.perf_counter()

            async def one(index: int) -> None:
                workdir = Path(scratch) / f"bare-{index}"
                (workdir / "tmp").mkdir(parents=True)
                key = f"bare-{index}"
                async with await anyio.open_process(
                    [str(node_executable()), str(script)],
                    env=_environment(workdir, port, key),
                    cwd=workdir,
                ) as process:
                    with anyio.fail_after(300):
                        await endpoint.wait_first(key)
                    tree = _tree(process.pid)
                    memory.append(_peak_rss_mib(tree))
                    _kill(tree)

            async with anyio.create_task_group() as starts:
                for index in range(agents):
                    starts.start_soon(one, index)
            tasks.cancel_scope.cancel()
    return {
        "bareFirstRequestS": round(max(endpoint.first.values()) - started, 3),
        "bareMemoryMiBEach": memory,
        "bareBody": next(iter(endpoint.bodies.values())),
    }


async def runtime_first_request() -> dict[str, Any]:
    """The runtime's own runner (trimmed options): its first request and the memory it holds."""
    endpoint = RecordingEndpoint()
    with tempfile.TemporaryDirectory(prefix="nanoclaw-runner-") as scratch:
        workdir = Path(scratch)
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(listener.serve, endpoint.serve)
            port = listener.extra(SocketAttribute.local_port)
            options = AgentOptions(identity="You are Sam. You sell a bike. Reply in one line.")
            environment = runner_environment(workdir, f"http://127.0.0.1:{port}", MODEL, options)
            started = time.perf_counter()
            with (workdir / "runner.log").open("ab") as log:
                async with open_runner(
                    workdir,
                    "Bea says: what is your price for the bike?",
                    options=options,
                    environment=environment,
                    model=MODEL,
                    log=log,
                ) as runner:
                    with anyio.fail_after(300):
                        await endpoint.wait_first("relay")
                    memory = _peak_rss_mib(_tree(runner.process.pid))
            tasks.cancel_scope.cancel()
    return {
        "runnerFirstRequestS": round(max(endpoint.first.values()) - started, 3),
        "runnerMemoryMiB": memory,
        "runnerBody": next(iter(endpoint.bodies.values())),
    }


async def prompt_tokens(bodies: dict[str, bytes]) -> dict[str, int | str]:
    """Each recorded first request's prompt tokens, as the local model counts them."""
    from controller.modelgateway import ModelGateway
    from controller.platforms.local_model import LocalModelServer

    class Ledger:
        async def append(self, event: object, *, producer: str) -> None:
            return None

    counted: dict[str, int | str] = {}
    async with LocalModelServer(n_ctx=16384) as server:
        async with ModelGateway(
            [server.provider()], ledger=Ledger(), credentials=server.credentials
        ) as gateway:
            token = gateway.issue_token("bench")
            async with httpx.AsyncClient(
                base_url=gateway.base_url, headers={"x-api-key": token}, timeout=600
            ) as client:
                for name, body in bodies.items():
                    request = json.loads(body) | {"max_tokens": 1, "stream": False, "model": MODEL}
                    answer = await client.post("/messages", json=request)
                    usage = answer.json().get("usage") if answer.status_code == 200 else None
                    counted[name] = usage["input_tokens"] if usage else f"HTTP {answer.status_code}"
    return counted


def nanoclaw_main(sizes: list[int], run_to_gate_s: Any, scratch: Path) -> list[dict[str, Any]]:
    """1 and 5 NanoClaw agents to the gate against as many bare SDK processes to their first
    request; then one runner's first request, both prompts in tokens, and memory per agent."""
    assert RUNNER_SCRIPT.is_file()
    results = []
    bodies: dict[str, bytes] = {}
    for agents in sizes:
        bare = anyio.run(bare_sdk_first_requests, agents)
        run = anyio.run(run_to_gate_s, agents, scratch, True, "nanoclaw")
        bodies["defaultOptions"] = bare.pop("bareBody")
        results.append(
            {
                "runtime": "nanoclaw",
                "agents": agents,
                "submitToGateS": round(run, 3),
                **bare,
                "ratio": round(run / bare["bareFirstRequestS"], 2),
            }
        )
        print(json.dumps(results[-1]), flush=True)
    runner = anyio.run(runtime_first_request)
    bodies["runtimeOptions"] = runner.pop("runnerBody")
    runner["promptTokensFirstTurn"] = anyio.run(prompt_tokens, bodies)
    runner["firstRequestBytes"] = {name: len(body) for name, body in bodies.items()}
    print(json.dumps(runner), flush=True)
    for result in results:
        print(
            f"{result['agents']} NanoClaw agents to the gate: {result['submitToGateS']} s; "
            f"{result['agents']} bare SDK processes to their first request: "
            f"{result['bareFirstRequestS']} s; ratio {result['ratio']}x"
        )
    tokens = runner["promptTokensFirstTurn"]
    print(
        f"first-turn prompt: SDK defaults {tokens['defaultOptions']} tokens "
        f"({runner['firstRequestBytes']['defaultOptions']} request bytes), the runtime's "
        f"{tokens['runtimeOptions']} ({runner['firstRequestBytes']['runtimeOptions']} bytes); "
        f"one runner to its first request "
        f"{runner['runnerFirstRequestS']} s, {runner['runnerMemoryMiB']} MiB peak (Node + CLI)"
    )
    return results
