"""The local sandbox holds: a spy agent tries every escape, and each is refused or contained.

The spy (``sandbox_spy.py``) is an agent program written for this test: it reads another agent's
secrets, the controller's environment and the run directory; connects to a loopback service
standing in for the Temporal server, to the router's TCP port, beyond the machine and to another
agent's bridge; starts a double-forked process in a new session; and forks without bound. Run
unsandboxed (the explicit opt-out), the same spy succeeds, which shows each probe can fail.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from run_support import processes_of

from controller import Run, RunSpec
from controller.agents import scripted
from controller.events.run import AgentIsolation
from controller.platforms.local import LocalPlatform
from controller.platforms.local import sandbox as local_sandbox
from controller.platforms.local.cgroup import CgroupLayout, run_group
from controller.platforms.local.launch import in_cgroups
from controller.platforms.local.sandbox import (
    FIRST_AGENT_UID,
    UID_BLOCK,
    UNSANDBOXED_ENV,
    AgentUids,
)
from controller.run import PlatformLost, RunContext, new_run_id
from controller.run.spec import load_run_spec
from ledger import open_ledger_artifacts

SPY = (Path(__file__).parent / "sandbox_spy.py").read_bytes()
REFUSED = (
    "read another agent's secrets",
    "list the run directory",
    "read the ledger",
    "read the controller's environment",
    "connect to the Temporal server's port",
    "connect to the router's TCP port",
    "connect beyond the machine",
    "reach another agent's bridge",
    "write outside the working directory",
)


KERNEL_REFUSED = (
    "read the controller's session keyring",
    "list the controller's keys",
    "leave a key in the session keyring",
    "leave a key in the uid's keyring",
    "request a key",
    "create a user namespace",
    "set up io_uring",
    "open an AF_VSOCK socket",
    "hold capabilities in the bounding set",
    "learn host paths from /proc/1/cmdline",
)
"""Refused by the seccomp filter, the fresh session keyring, the agent's own uid, the empty
bounding set and bwrap's options read from a descriptor."""
SECCOMP_REFUSED = tuple(p for p in KERNEL_REFUSED[:8] if p != "list the controller's keys")
"""The system calls among them (the rest: the spy found nothing to take)."""


@pytest.fixture
def temporal_port() -> Iterator[int]:
    """A real listener on loopback, standing in for the Temporal dev server's port."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


MODULE = """\
import dataclasses
import os
from controller import RunSpec
from controller.agents import Harvest, scripted

async def execute(ctx):
    return "the spy was admitted"

def spy(peer):
    agent = scripted(
        files={{"spy.py": {spy!r}}},
        environment={{
            "SPY_ROOT": {root!r},
            "SPY_PEER": peer,
            "SPY_OUTER_PATH": {outer!r},
            "SPY_TARGET_PORT": "{port}",
            "SPY_CONTROLLER_PID": str(os.getpid()),
        }},
        harvest=Harvest(files=("spy-report.json",)),
    )
    return dataclasses.replace(agent, command=("python", "spy.py"))

run_spec = RunSpec.define(
    id="acme.spy/v1", agents={{"alice": spy("bob"), "bob": spy("alice")}}, execute=execute
)
"""

CONTROLLER = """\
import ctypes, sys
import anyio
from controller.platforms.local import LocalPlatform
from controller.run import RunRequest, execute_run

module, run_id, root, secret = sys.argv[1:5]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(250, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING: a session keyring of its own
assert libc.syscall(248, b"user", b"spy-secret", secret.encode(), len(secret), -3) > 0  # add_key
request = RunRequest(module_path=module, run_id=run_id, artifact_root=root)
result = anyio.run(execute_run, request, LocalPlatform())
print(result.model_dump_json())
"""


@dataclass(frozen=True)
class SpyRun:
    run_dir: Path
    result: dict[str, Any]
    report: dict[str, Any]
    report_text: str
    isolation: AgentIsolation
    peer_report: dict[str, Any]


def run_spy(
    tmp_path: Path, temporal_port: int, provider_key: str, keyring_secret: str, **env: str
) -> SpyRun:
    """Run the spies' society (alice and bob) in a controller process that holds
    ``provider_key`` in its environment, as ``society run`` would hold a provider key, and
    ``keyring_secret`` in its session keyring, as a login shell's keyring may hold one."""
    root = tmp_path / "artifacts"
    module = tmp_path / "spy_society.py"
    module.write_text(
        MODULE.format(spy=SPY, root=str(root), port=temporal_port, outer=str(tmp_path))
    )
    run_id = new_run_id()
    environment = {**os.environ, "SPY_PROVIDER_KEY": provider_key, **env}
    controller = subprocess.run(
        [sys.executable, "-c", CONTROLLER, str(module), run_id, str(root), keyring_secret],
        env=environment,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert controller.returncode == 0, controller.stderr.decode()[-3000:]
    result = json.loads(controller.stdout.decode().splitlines()[-1])
    run_dir = root / run_id
    report_text = (run_dir / "artifacts" / "alice" / "workspace" / "spy-report.json").read_text()
    peer_text = (run_dir / "artifacts" / "bob" / "workspace" / "spy-report.json").read_text()
    (isolation,) = [
        record.event
        for record in open_ledger_artifacts(
            load_run_spec(module).catalog, run_dir / "ledger" / "main"
        )
        if isinstance(record.event, AgentIsolation)
    ]
    assert isinstance(isolation, AgentIsolation)
    return SpyRun(
        run_dir, result, json.loads(report_text), report_text, isolation, json.loads(peer_text)
    )


def test_a_spy_agent_is_refused_or_contained_at_every_step(
    tmp_path: Path, temporal_port: int
) -> None:
    provider_key = f"sk-spy-{secrets.token_hex(16)}"
    keyring_secret = f"keyring-{secrets.token_hex(16)}"
    spy = run_spy(tmp_path, temporal_port, provider_key, keyring_secret)
    report = spy.report
    assert report["uid"] != spy.peer_report["uid"]  # no two agents share a uid (or its keyring)
    assert min(report["uid"], spy.peer_report["uid"]) >= FIRST_AGENT_UID
    for probe in REFUSED:
        assert report[probe]["ok"] is False, (probe, report[probe])
    for probe in KERNEL_REFUSED:
        for agent in (report, spy.peer_report):
            assert agent[probe]["ok"] is False, (probe, agent[probe])
            assert agent[probe]["error"] == "PermissionError", (probe, agent[probe])
            if probe in SECCOMP_REFUSED:  # EPERM, the filter's answer
                assert agent[probe]["detail"].startswith("[Errno 1] "), (probe, agent[probe])
    assert report["seccomp"] == ["Seccomp:\t2"]
    assert provider_key not in spy.report_text and keyring_secret not in spy.report_text
    assert stat.S_IMODE(spy.run_dir.stat().st_mode) == 0o700  # run files: the submitter's only
    # it inherited stdin, its log and its bridge's listening socket, nothing else
    inherited = json.loads(report["inherited descriptors"]["got"])
    bridge = report["bridge fd"]
    assert inherited == {"0": "null", "1": "output.log", "2": "output.log", bridge: "socket"}
    # its /proc shows only its own sandbox: bwrap's init and the spy
    assert json.loads(report["see other processes"]["got"]) == [1, 2]
    # the fork bomb hit the cgroup's pids limit; the survivor died with the run
    assert report["fork without bound"]["got"].startswith("BlockingIOError after ")
    assert report["start a process that outlives the run"]["got"] == "started"
    run_id = spy.run_dir.name
    assert processes_of(run_id) == []
    group = run_group(spy.run_dir)
    assert group is not None
    assert all(not d.exists() for d in CgroupLayout.detect().run_directories(group))
    isolation = spy.isolation
    assert (isolation.sandbox, isolation.uid, isolation.cgroups) == ("bubblewrap", None, "v1")


def test_unsandboxed_the_same_spy_succeeds_and_the_ledger_says_so(
    tmp_path: Path, temporal_port: int
) -> None:
    provider_key = f"sk-spy-{secrets.token_hex(16)}"
    keyring_secret = f"keyring-{secrets.token_hex(16)}"
    spy = run_spy(tmp_path, temporal_port, provider_key, keyring_secret, **{UNSANDBOXED_ENV: "1"})
    report = spy.report
    assert report["read the controller's session keyring"]["got"] == keyring_secret
    for probe in (
        "leave a key in the session keyring",
        "create a user namespace",
        "set up io_uring",
        "open an AF_VSOCK socket",
        "hold capabilities in the bounding set",
    ):
        assert report[probe]["ok"] is True, (probe, report[probe])
    assert report["read another agent's secrets"]["ok"] is True
    assert "routerToken" in report["read another agent's secrets"]["got"]
    assert report["read the controller's environment"]["got"] == f"SPY_PROVIDER_KEY={provider_key}"
    assert report["connect to the Temporal server's port"]["ok"] is True
    assert spy.isolation.sandbox == "none"
    # even unsandboxed, the agent's cgroup holds (and teardown kills) what it started
    assert report["fork without bound"]["got"].startswith("BlockingIOError after ")
    assert processes_of(spy.run_dir.name) == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("bwrap", "next_step"),
    [
        (None, "apt-get install bubblewrap"),
        ("/bin/false", "enable unprivileged user namespaces"),  # a bwrap that cannot sandbox
    ],
)
async def test_without_a_working_bubblewrap_a_run_refuses_and_names_the_next_step(
    artifact_root: Path, monkeypatch: pytest.MonkeyPatch, bwrap: str | None, next_step: str
) -> None:
    async def execute(ctx: RunContext) -> str:
        raise AssertionError("nothing may run unsandboxed by accident")

    which = local_sandbox.shutil.which
    monkeypatch.setattr(
        local_sandbox.shutil, "which", lambda name: bwrap if name == "bwrap" else which(name)
    )
    local_sandbox._probe.cache_clear()
    try:
        spec = RunSpec.define(id="acme.spy/v1", agents={"alice": scripted()}, execute=execute)
        outcome = await Run.execute(spec, artifact_root=artifact_root, platform=LocalPlatform())
    finally:
        local_sandbox._probe.cache_clear()
    assert isinstance(outcome, PlatformLost)
    assert outcome.cause.reason == "sandbox-unavailable"
    assert next_step in outcome.cause.detail
    assert "--unsandboxed" in outcome.cause.detail


def test_an_agent_cgroup_holds_its_limits_and_destroy_kills_every_member() -> None:
    """A process that joined the group before exec, and everything it starts in any session, is a
    member; destroying the run's groups kills them all and leaves no group behind."""
    layout = CgroupLayout.detect()
    run_id = new_run_id()
    group = layout.create(run_id, "alice", pids_max=64, memory_bytes=64 * 1024 * 1024)
    limits = [
        (d / name).read_text().strip()
        for d in group.directories
        for name in ("pids.max", "memory.limit_in_bytes", "memory.max")
        if (d / name).exists()
    ]
    assert limits == ["64", str(64 * 1024 * 1024)]
    job = "sleep 60 & setsid sh -c 'sleep 60 & wait' & wait"
    leader = subprocess.Popen(in_cgroups(group.procs_files, ["/bin/sh", "-c", job]))
    try:
        deadline = time.monotonic() + 10
        while len(group.members()) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        members = group.members()
        assert leader.pid in members and len(members) == 4
        assert set(layout.destroy(run_id)) == members
        assert leader.wait(5) == -signal.SIGKILL
        assert all(not d.exists() for d in layout.run_directories(run_id))
    finally:
        layout.destroy(run_id)
        if leader.poll() is None:
            leader.kill()
            leader.wait()


def test_the_bubblewrap_probe_binds_an_empty_home_never_the_host_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Binding "/" at the probe's home made bwrap remount every host mount read-only and fail
    (as "sandbox-unavailable") whenever a container overlay went away meanwhile."""
    seen: list[list[str]] = []
    run = local_sandbox.subprocess.run

    def spy(argv: list[str], **kwargs: Any) -> Any:
        seen.append(list(argv))
        return run(argv, **kwargs)

    monkeypatch.setattr(local_sandbox.subprocess, "run", spy)
    local_sandbox._probe.cache_clear()
    try:
        local_sandbox._probe()
    finally:
        local_sandbox._probe.cache_clear()
    probe = next(argv for argv in seen if local_sandbox.HOME in argv)
    home = probe.index(local_sandbox.HOME)
    assert probe[home - 2] == "--ro-bind" and probe[home - 1] != "/"
    assert not Path(probe[home - 1]).exists()  # a private empty directory, removed afterwards


def test_two_live_runs_that_draw_the_same_uid_block_get_different_uids(tmp_path: Path) -> None:
    """The block comes from the run id: two ids alike in their first 8 hex digits draw one block,
    and the second run, finding it held, takes the next free one; released, it is free again
    and its claim file is gone."""
    first_id, second_id = (f"sr-0000abcd{secrets.token_hex(12)}" for _ in range(2))
    first, second = (AgentUids(i, claims=tmp_path) for i in (first_id, second_id))
    try:
        taken = [first.take(), first.take(), second.take()]
        assert taken == [first.first, first.first + 1, first.first + UID_BLOCK]
    finally:
        first.release()
        second.release()
    third = AgentUids(f"sr-0000abcd{secrets.token_hex(12)}", claims=tmp_path)
    try:
        assert third.take() == first.first
    finally:
        third.release()
    assert not list(tmp_path.iterdir()), "a released block left its claim file behind"
