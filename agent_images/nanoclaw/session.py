"""One NanoClaw runner process (``runner.mjs``) and its session, driven over NanoClaw's contract.

``open_runner`` starts the runner with the session's input on its stdin (one JSON line); each
``follow_up`` is one more line, ``close`` the closing one. Every output the runner writes between
NanoClaw's markers on stdout comes out of ``outputs`` as a decoded object: a result
(``{"status", "result", "newSessionId", ...}``) or a ``send_message`` call
(``{"sendMessage": {"text"}}``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from society_sandbox.runtimes.nanoclaw import (
    OUTPUT_END,
    OUTPUT_START,
    TRAFFIC_VARIABLES,
    AgentOptions,
    claude_code_executable,
    node_executable,
    runner_modules,
)

RUNNER_SCRIPT = Path(__file__).resolve().parent / "runner.mjs"

MAX_OUTPUT = 1024 * 1024
STOP_GRACE_S = 5.0


class RunnerMissing(Exception):
    """Node or the SDK is not installed where the runtime looks; the message says what to run."""


@dataclass
class Runner:
    """A started runner: write follow-ups, read outputs, close."""

    process: Process

    async def follow_up(self, text: str) -> None:
        await self._line({"type": "message", "text": text})

    async def close(self) -> None:
        try:
            await self._line({"type": "close"})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async def _line(self, frame: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(frame).encode() + b"\n")

    async def outputs(self) -> AsyncIterator[dict[str, Any]]:
        """Each object the runner writes between the markers, until its stdout ends."""
        assert self.process.stdout is not None
        reader = BufferedByteReceiveStream(self.process.stdout)
        inside: list[bytes] | None = None
        while True:
            try:
                line = (await reader.receive_until(b"\n", MAX_OUTPUT)).strip()
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return
            if line == OUTPUT_START.encode():
                inside = []
            elif line == OUTPUT_END.encode() and inside is not None:
                try:
                    output = json.loads(b"\n".join(inside))
                except ValueError:
                    output = None
                if isinstance(output, dict):
                    yield output
                inside = None
            elif inside is not None:
                inside.append(line)


def check_installed() -> None:
    for path in (node_executable(), claude_code_executable(), runner_modules()):
        if not path.exists():
            raise RunnerMissing(
                f"the NanoClaw runtime is not installed ({path} is missing); run "
                f"scripts/install-nanoclaw.sh (`society run` does when a roster needs it)"
            )


def runner_environment(
    workdir: Path, base_url: str, model: str, options: AgentOptions
) -> dict[str, str]:
    """The runner's (and the CLI's) whole environment: the relay as the Anthropic endpoint with a
    dummy key, the traffic variables, and a home inside the working directory."""
    return {
        "PATH": os.pathsep.join([str(node_executable().parent), "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "HOME": str(workdir),
        "TMPDIR": str(workdir / "tmp"),
        "SOCIETY_NANOCLAW_MODULES": str(runner_modules()),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "relay",  # the relay adds the agent's own gateway token
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(options.output_tokens),
        "NO_COLOR": "1",
        **TRAFFIC_VARIABLES,
    }


@asynccontextmanager
async def open_runner(
    workdir: Path,
    prompt: str,
    *,
    options: AgentOptions,
    environment: Mapping[str, str],
    model: str,
    log: IO[bytes],
    prefix: Sequence[str] = (),
) -> AsyncIterator[Runner]:
    """Start one runner for ``prompt``; leaving the block closes its session and reaps it.

    ``prefix`` runs it under another program (``strace -f``, to watch what it connects to)."""
    (workdir / "tmp").mkdir(exist_ok=True)
    first = {
        "prompt": prompt,
        "model": model,
        "systemPrompt": options.identity,
        "maxTurns": options.sdk_max_turns,
        "claudeCode": str(claude_code_executable()),
    }
    process = await anyio.open_process(
        [*prefix, str(node_executable()), str(RUNNER_SCRIPT)],
        env=dict(environment),
        cwd=workdir,
        stderr=log,
    )
    runner = Runner(process)
    try:
        await runner._line(first)
        yield runner
    finally:
        with anyio.CancelScope(shield=True):
            await runner.close()
            await _stop(process)
            await process.aclose()


async def _stop(process: Process) -> None:
    with anyio.move_on_after(STOP_GRACE_S):
        await process.wait()
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(STOP_GRACE_S):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
