"""The scripted agent program as its container runs it: boot variables, bridge, router session."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from controller.agents import Completed, Failed, Observation, ProcessExit, SandboxAccess, scripted
from society_sandbox.boot import Secrets
from society_sandbox.runtimes.scripted import ScriptedPolicy

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

ROUTER = """\
import json, sys
from pathlib import Path
import anyio
from controller.events import core_events
from controller.network.router import Router
from ledger import Provenance, open_ledger_writer

async def main(directory: str) -> None:
    async with open_ledger_writer(
        Path(directory), catalog=core_events, definition_id="test.router/v1",
        run_id="sr-" + "0" * 32, provenance=Provenance.current("local"),
    ) as ledger:
        async with Router.serve(ledger) as router:
            credential = router.register("alice")
            await router.dispatch()
            print(json.dumps({"url": router.url, "token": credential.token}), flush=True)
            await anyio.sleep_forever()

anyio.run(main, sys.argv[1])
"""


@asynccontextmanager
async def router_process(tmp_path: Path) -> AsyncIterator[tuple[Process, dict[str, str]]]:
    """A router in its own process, so that a test can make it disappear with SIGKILL."""
    process = await anyio.open_process(
        [sys.executable, "-c", ROUTER, str(tmp_path / "ledger")], cwd=ROOT
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        yield process, json.loads(line)
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


@asynccontextmanager
async def scripted_agent(
    tmp_path: Path, router: dict[str, str], **environment: str
) -> AsyncIterator[tuple[Process, SandboxAccess]]:
    """``python -m agent_images.scripted`` booted as a container would boot it (it binds a port)."""
    work = tmp_path / "work"
    (work / ".society").mkdir(parents=True)
    (work / "policy.json").write_bytes(scripted(ScriptedPolicy()).files["policy.json"])
    (work / ".society" / "secrets.json").write_bytes(
        Secrets(router_token=router["token"], bridge_token="bridge-token").to_json()
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SOCIETY_AGENT_NAME": "alice",
        "SOCIETY_ROUTER_URL": router["url"],
        "SOCIETY_BRIDGE_PORT": str(port),
        "SOCIETY_RUN_SEED": "1",
        **environment,
    }
    process = await anyio.open_process(
        [sys.executable, "-m", "agent_images.scripted"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    exited: Observation[ProcessExit] = Observation()

    async def reap() -> None:
        exited.set(ProcessExit.from_returncode(await process.wait()))

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reap)
            yield process, SandboxAccess("alice", "127.0.0.1", port, "bridge-token", exited)
            tasks.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def stderr_of(process: Process) -> str:
    assert process.stderr is not None
    chunks = []
    async for chunk in process.stderr:
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


async def test_a_stopped_agent_exits_cleanly_and_its_bridge_reports_completed(
    tmp_path: Path,
) -> None:
    async with router_process(tmp_path) as (_, router):
        async with scripted_agent(tmp_path, router) as (process, access):
            async with scripted().attach(access) as attachment:
                state: dict[str, Any] = await attachment.owner.state()
                with anyio.fail_after(10):  # the bridge answers before the router session is up
                    while state["participantId"] is None:
                        await anyio.sleep(0.05)
                        state = await attachment.owner.state()
                assert state["name"] == "alice" and state["participantId"] == "agent:alice"
                await attachment.owner.stop()
                with anyio.fail_after(10):
                    assert await attachment.termination == Completed()
            assert process.returncode == 0


async def test_an_agent_exits_when_its_router_disappears(tmp_path: Path) -> None:
    async with router_process(tmp_path) as (router, address):
        async with scripted_agent(tmp_path, address, SOCIETY_ROUTER_LOST_AFTER_S="1") as (
            process,
            access,
        ):
            async with scripted().attach(access) as attachment:
                with anyio.fail_after(10):  # the bridge answers before the router session is up
                    while not (await attachment.owner.state())["authenticated"]:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                router.send_signal(signal.SIGKILL)
                with anyio.fail_after(15):
                    ended = await attachment.termination
            assert isinstance(ended, Failed) and ended.exit_code == 1
            assert "no router for 1 s" in ended.detail
            assert "router session ended" in await stderr_of(process)
