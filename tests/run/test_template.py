"""Agents forked from a pre-imported template enter the same sandbox as bwrap gives them.

A probe program reports what it sees from inside (capabilities, ``no_new_privs``, seccomp, uid,
groups, its mount view, network, hostname, processes, descriptors) once started by bubblewrap and
once forked from a template, and the reports must match. The spy of ``test_sandbox`` and the
killed controller of ``test_controller_death`` then run unchanged against template forks; a
fork that cannot enter its sandbox exits before its program runs (its run fails the gate).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
import test_controller_death
import test_sandbox

from controller import RunSpec
from controller.agents import scripted
from controller.platforms.local import LocalPlatform
from controller.platforms.local.isolation import TEMPLATE_ENV, TEMPLATE_TOOL
from controller.platforms.local.launch import fresh_session_keyring
from controller.platforms.local.namespaces import FAILED
from controller.platforms.local.sandbox import (
    FIRST_AGENT_UID,
    Bubblewrap,
    python_executable,
    seal,
)
from controller.platforms.local.template import ForkedAgent, launcher_plan, running_template
from controller.run import PlatformLost, Run, RunContext, new_run_id

temporal_port = test_sandbox.temporal_port
"""The spy test's fixture: a loopback listener standing in for the Temporal server's port."""

PROBE = """\
import json, os, socket
def mounts():
    seen = []
    for line in open("/proc/self/mountinfo"):
        before, after = line.split(" - ")
        fields, (fstype, *_) = before.split(), after.split()
        root = "" if fields[4] == "/" else fields[3]
        seen.append([fields[4], root, fields[5], fstype])
    return sorted(seen)
def loopback():
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname(), timeout=2):
            return "connected"
status = [line.strip() for line in open("/proc/self/status")
          if line.startswith(("Cap", "NoNewPrivs", "Seccomp", "Uid", "Gid", "Groups"))]
print(json.dumps({
    "status": status,
    "mounts": mounts(),
    "interfaces": [name for _, name in socket.if_nameindex()],
    "loopback": loopback(),
    "hostname": socket.gethostname(),
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "root": sorted(os.listdir("/")),
    "dev": sorted(os.listdir("/dev")),
    "cwd": os.getcwd(),
    "session": [os.getsid(0), os.getpgid(0)],
    "cgroup": open("/proc/self/cgroup").read(),
    "mark": os.environ.get("PROBE_MARK"),
    "shown": open("/proc/self/environ").read().split("\\0"),
    "proc owner": os.stat("/proc/self/environ").st_uid,
    "cmdline": open("/proc/self/cmdline").read().split("\\0")[:2],
}))
"""


def bwrap_report(bwrap: Bubblewrap, workdir: Path) -> dict[str, Any]:
    """The probe as ``LocalSession`` starts it with bubblewrap (fresh keyring, sealed options)."""
    inner = [python_executable(), "-c", PROBE]
    sealed = seal(bwrap, inner, workdir=workdir, sockets=(), uid=FIRST_AGENT_UID)
    try:
        done = subprocess.run(
            fresh_session_keyring(sealed.argv),
            pass_fds=sealed.fds,
            env={"PROBE_MARK": "bwrap", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            capture_output=True,
            timeout=60,
            check=True,
        )
    finally:
        sealed.close()
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def fork_report(
    bwrap: Bubblewrap, workdir: Path, log: Path, *, cgroups: tuple[str, ...] = ()
) -> tuple[int, str]:
    """The probe forked from a template; its exit status and its log."""
    launcher = ["run", "probe", "0", "-1", "{}", "--", "python", "-c", PROBE]
    plan = {
        **bwrap.mount_plan(workdir=workdir, sockets=()),
        **launcher_plan(launcher),
        "uid": FIRST_AGENT_UID,
        "cgroups": list(cgroups),
        "seccomp": bwrap.seccomp.hex(),
        "environment": {"PROBE_MARK": "template", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        "bridge_fd": 3,
    }
    async with anyio.create_task_group() as tasks:
        async with running_template(
            python_executable(), bwrap.python_path, ("json",), run_id=new_run_id(), tasks=tasks
        ) as template:
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            stdin = os.open(os.devnull, os.O_RDONLY)
            try:
                fork = await template.fork(plan, (stdin, out, stdin))
            finally:
                os.close(stdin)
                os.close(out)
            with anyio.fail_after(60):
                code = await fork.wait()
        tasks.cancel_scope.cancel()
    return code, await anyio.Path(log).read_text()


@pytest.mark.anyio
async def test_a_template_fork_sees_and_holds_exactly_what_a_bwrap_started_agent_does(
    tmp_path: Path,
) -> None:
    bwrap = Bubblewrap.probe()
    workdir = tmp_path / "work"
    workdir.mkdir()
    workdir.chmod(0o777)
    started = bwrap_report(bwrap, workdir)
    code, log = await fork_report(bwrap, workdir, tmp_path / "fork.log")
    assert code == 0, log
    forked = json.loads(log.splitlines()[-1])
    assert (started.pop("mark"), forked.pop("mark")) == ("bwrap", "template")
    assert "PROBE_MARK=template" in forked["shown"]  # /proc shows its own environment
    shown = sorted(v.replace("template", "bwrap") for v in forked.pop("shown"))
    assert sorted(started.pop("shown")) == shown
    assert forked["cmdline"] == [python_executable(), "-c"]
    assert forked == started
    assert f"Uid:\t{FIRST_AGENT_UID}\t{FIRST_AGENT_UID}\t{FIRST_AGENT_UID}" in forked["status"][0]
    assert "CapBnd:\t0000000000000000" in forked["status"]
    assert "Seccomp:\t2" in forked["status"] and "NoNewPrivs:\t1" in forked["status"]
    assert forked["interfaces"] == ["lo"] and forked["processes"] == [1, 2]


@pytest.mark.anyio
async def test_a_fork_that_cannot_enter_its_sandbox_exits_before_its_program_runs(
    tmp_path: Path,
) -> None:
    bwrap = Bubblewrap.probe()
    workdir = tmp_path / "work"
    workdir.mkdir()
    missing = str(tmp_path / "no-such-cgroup" / "cgroup.procs")
    code, log = await fork_report(bwrap, workdir, tmp_path / "fork.log", cgroups=(missing,))
    assert code == FAILED
    assert "cannot enter its sandbox" in log and '"status"' not in log


BRIDGE_PROBE = """\
import os, socket, stat
fd = int(os.environ["PROBE_BRIDGE_FD"])
print("socket" if stat.S_ISSOCK(os.fstat(fd).st_mode) else "not a socket", flush=True)
"""


@pytest.mark.anyio
async def test_the_bridge_reaches_the_agent_open_whatever_number_it_takes(tmp_path: Path) -> None:
    """The template's own descriptors are closed under the agent, never over its bridge."""
    bwrap = Bubblewrap.probe()
    workdir = tmp_path / "work"
    workdir.mkdir()
    launcher = ["run", "probe", "0", "-1", "{}", "--", "python", "-c", BRIDGE_PROBE]
    answers: dict[int, str] = {}
    forks: dict[int, ForkedAgent] = {}
    async with anyio.create_task_group() as tasks:
        async with running_template(
            python_executable(), bwrap.python_path, (), run_id=new_run_id(), tasks=tasks
        ) as template:
            for number in range(3, 40):
                plan = {
                    **bwrap.mount_plan(workdir=workdir, sockets=()),
                    **launcher_plan(launcher),
                    "uid": FIRST_AGENT_UID,
                    "cgroups": [],
                    "seccomp": bwrap.seccomp.hex(),
                    "environment": {"PROBE_BRIDGE_FD": str(number), "LANG": "C.UTF-8"},
                    "bridge_fd": number,
                }
                log = tmp_path / f"bridge-{number}.log"
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                stdin = os.open(os.devnull, os.O_RDONLY)
                try:
                    with socket.socket(socket.AF_UNIX) as bridge:
                        fork = await template.fork(plan, (stdin, out, bridge.fileno()))
                finally:
                    os.close(stdin)
                    os.close(out)
                forks[number] = fork
            with anyio.fail_after(60):
                for number, fork in forks.items():
                    await fork.wait()
                    log = anyio.Path(tmp_path / f"bridge-{number}.log")
                    answers[number] = (await log.read_text()).strip()
        tasks.cancel_scope.cancel()
    assert answers == {number: "socket" for number in range(3, 40)}


def test_the_spy_is_refused_or_contained_at_every_step_when_forked_from_a_template(
    tmp_path: Path, temporal_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[test_sandbox.SpyRun] = []

    def recorded(*args: Any, **env: str) -> test_sandbox.SpyRun:
        runs.append(run_spy(*args, **env))
        return runs[-1]

    run_spy = test_sandbox.run_spy
    monkeypatch.setattr(test_sandbox, "run_spy", recorded)
    monkeypatch.setenv(TEMPLATE_ENV, "1")
    test_sandbox.test_a_spy_agent_is_refused_or_contained_at_every_step(tmp_path, temporal_port)
    (spy,) = runs
    assert spy.isolation.tool is not None and spy.isolation.tool.startswith(TEMPLATE_TOOL)


def test_forked_agents_do_not_outlive_a_killed_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEMPLATE_ENV, "1")
    killed = test_controller_death
    killed.test_agents_do_not_outlive_a_killed_controller_and_the_next_start_reaps_the_run(tmp_path)


@pytest.mark.anyio
async def test_a_template_run_whose_fork_cannot_be_sandboxed_fails_the_gate(
    artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount_plan = Bubblewrap.mount_plan

    def unbuildable(self: Bubblewrap, **kwargs: Any) -> dict[str, object]:
        plan = mount_plan(self, **kwargs)
        binds = plan["binds"]
        assert isinstance(binds, list)
        binds.append(["--ro-bind", str(artifact_root / "no-such-source"), "/opt/missing"])
        return plan

    monkeypatch.setattr(Bubblewrap, "mount_plan", unbuildable)
    ran = False

    async def execute(ctx: RunContext) -> None:
        nonlocal ran
        ran = True

    spec = RunSpec.define(
        id="acme.template/v1", agents={"alice": scripted(ready_timeout_s=20.0)}, execute=execute
    )
    platform = LocalPlatform(template=True)
    outcome = await Run.execute(spec, platform=platform, artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "readiness-gate-failed"
    assert not ran
    assert (
        f"ProcessExit(code={FAILED}, signal=None)" in outcome.cause.detail
    )  # before any agent code
