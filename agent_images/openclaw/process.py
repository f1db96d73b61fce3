"""Start ``openclaw gateway run`` with a headless config, and wait until its RPC answers."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import Process

from society_sandbox.runtimes.openclaw import (
    GATEWAY_LOG,
    node_bin,
    openclaw_environment,
    openclaw_executable,
)
from society_sandbox.runtimes.openclaw_rpc import OpenClawRPCError, open_rpc

CONFIG_FILE = "openclaw.json"
STOP_GRACE_S = 10.0


class OpenClawStartError(Exception):
    """OpenClaw did not start; ``reason`` is machine-readable, the message names the next step."""

    def __init__(self, detail: str, *, reason: str) -> None:
        super().__init__(detail)
        self.reason = reason


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def openclaw_gateway(workdir: Path, config: dict[str, Any]) -> AsyncIterator[Process]:
    """Write ``config`` into ``workdir`` and run OpenClaw's gateway until the block ends; its
    output goes to ``openclaw-gateway.log`` there."""
    executable = openclaw_executable()
    if not executable.is_file():
        raise OpenClawStartError(
            f"OpenClaw is not installed at {executable}; run scripts/install-openclaw.sh "
            f"(`society run` does when a roster needs it; so does scripts/bootstrap.sh --all)",
            reason="openclaw-missing",
        )
    config_path = _write_config(workdir, config)
    env = {
        "PATH": os.pathsep.join([str(node_bin()), "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        **openclaw_environment(workdir, config_path),
    }
    with _open_log(workdir / GATEWAY_LOG) as log:
        process = await anyio.open_process(
            [str(executable), "gateway", "run"], env=env, cwd=workdir, stdout=log, stderr=log
        )
        try:
            yield process
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)


def _write_config(workdir: Path, config: dict[str, Any]) -> Path:
    (workdir / "tmp").mkdir(exist_ok=True)
    path = workdir / CONFIG_FILE
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    path.chmod(0o600)  # it holds the gateway token
    return path


def _open_log(path: Path) -> IO[bytes]:
    return open(path, "ab")


async def wait_ready(process: Process, port: int, token: str, *, timeout_s: float) -> bool:
    """Retry the RPC handshake until it succeeds (``True``) or the process ends (``False``).

    Raises ``OpenClawStartError`` (``openclaw-timeout``) when ``timeout_s`` passes.
    """
    last = "no answer yet"
    with anyio.move_on_after(timeout_s):
        while process.returncode is None:
            try:
                async with open_rpc(token, url=f"ws://127.0.0.1:{port}/"):
                    return True
            except OpenClawRPCError as exc:
                last = str(exc)
            await anyio.sleep(0.5)
        return False
    raise OpenClawStartError(
        f"OpenClaw's gateway did not answer within {timeout_s:g} s ({last}); see {GATEWAY_LOG}",
        reason="openclaw-timeout",
    )


async def _stop(process: Process) -> None:
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(STOP_GRACE_S):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
