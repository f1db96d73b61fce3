"""If the controller dies, its agents die with it; the next start reaps what the run left."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_support import processes_of

from controller.platforms.local import reap_run, reap_stale_runs
from controller.platforms.local.cgroup import CgroupLayout, run_group
from controller.platforms.local.launch import RUN_MARK
from controller.platforms.local.reap import ProcessRecord, agent_record, boot_id, write_record
from controller.run import new_run_id

ROOT = Path(__file__).resolve().parents[2]

MODULE = """\
from pathlib import Path
import anyio
from controller import RunSpec
from controller.agents import scripted

async def execute(ctx):
    Path({marker!r}).write_text("dispatched")
    await anyio.sleep_forever()

run_spec = RunSpec.define(
    id="acme.orphans/v1",
    agents={{"alice": scripted(), "bob": scripted()}},
    execute=execute,
)
"""

CONTROLLER = """\
import sys
import anyio
from controller.platforms.local import LocalPlatform
from controller.run import RunRequest, execute_run

module, run_id, root = sys.argv[1:4]
request = RunRequest(module_path=module, run_id=run_id, artifact_root=root)
anyio.run(execute_run, request, LocalPlatform())
"""


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_agents_do_not_outlive_a_killed_controller_and_the_next_start_reaps_the_run(
    tmp_path: Path,
) -> None:
    root = tmp_path / "artifacts"
    marker = tmp_path / "dispatched"
    module = tmp_path / "orphans.py"
    module.write_text(MODULE.format(marker=str(marker)))
    run_id = new_run_id()
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(module), run_id, str(root)], cwd=ROOT
    )
    try:
        wait_until(marker.exists, 60, "the program to be dispatched")
        pids = root / run_id / "pids"
        agents = [ProcessRecord.read(pids / agent_record(name)) for name in ("alice", "bob")]
        assert all(record is not None and record.is_alive() for record in agents)
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
        wait_until(
            lambda: not any(r is not None and r.is_alive() for r in agents),
            5,
            "the agents to die with their controller",
        )
        assert processes_of(run_id) == []
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()

    run_dir = root / run_id
    assert (run_dir / "sandboxes").is_dir()  # left behind, with its secrets files
    assert not (run_dir / "ledger" / "main" / "completion.json").exists()
    reports = reap_stale_runs(root)
    assert [(r.run_id, r.skipped) for r in reports] == [(run_id, None)]
    assert not (run_dir / "sandboxes").exists() and not (run_dir / "pids").exists()
    assert (run_dir / "ledger" / "main" / "records.ndjson").is_file()  # evidence stays
    group = run_group(run_dir)
    assert group is not None
    assert all(not d.exists() for d in CgroupLayout.detect().run_directories(group))


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in for an orphaned agent: its command line names a run, like a launcher's, and its
    environment carries the run's mark, as every process an agent starts does."""
    run_id = new_run_id()
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", run_id],
        start_new_session=True,
        env={**os.environ, RUN_MARK: run_id},
    )
    process.run_id = run_id  # type: ignore[attr-defined]
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    # Until the child has exec'd, its command line is still the parent's and names no run.
    wait_until(
        lambda: (
            run_id.encode() in cmdline.read_bytes()
            and ProcessRecord.of(process.pid, "agent", "probe") is not None
        ),
        10,
        "the sleeper",
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def orphan(root: Path, run_id: str, agent: ProcessRecord, controller_alive: bool) -> None:
    pids = root / run_id / "pids"
    pids.mkdir(parents=True)
    agent = dataclasses.replace(agent, run_group=run_group(root / run_id) or "")
    controller = (
        ProcessRecord.of(os.getpid(), "controller")
        if controller_alive
        else ProcessRecord(
            pid=2**22 - 1, start_time=1, boot_id=boot_id(), uid=os.getuid(), kind="controller"
        )
    )
    assert controller is not None
    write_record(pids, controller)
    write_record(pids, agent)
    (root / run_id / "sandboxes" / agent.name / "work").mkdir(parents=True)


def test_reaping_kills_a_dead_runs_agent_after_checking_its_start_time(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    run_id = sleeper.run_id  # type: ignore[attr-defined]
    record = ProcessRecord.of(sleeper.pid, "agent", "alice")
    assert record is not None
    orphan(tmp_path, run_id, record, controller_alive=False)
    (report,) = reap_stale_runs(tmp_path)
    assert report.run_id == run_id and sleeper.pid in report.killed
    assert sleeper.wait(5) == -signal.SIGKILL
    assert not (tmp_path / run_id / "sandboxes").exists()


def test_a_reused_pid_is_never_killed(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    run_id = sleeper.run_id  # type: ignore[attr-defined]
    record = ProcessRecord.of(sleeper.pid, "agent", "alice")
    assert record is not None
    earlier = ProcessRecord(
        pid=record.pid, start_time=record.start_time - 1, boot_id=record.boot_id, uid=record.uid,
        kind="agent",
        name="alice",
    )  # fmt: skip
    orphan(tmp_path, run_id, earlier, controller_alive=False)
    (report,) = reap_stale_runs(tmp_path)
    assert report.killed == ()
    assert sleeper.poll() is None


def test_a_forged_record_never_points_the_reaper_at_a_foreign_process_group(
    tmp_path: Path,
) -> None:
    """An unsandboxed agent can rewrite its run's pid records: it names a process group of ours
    that is not the run's (a shell and its job), with a start time before everything."""
    victim = subprocess.Popen(
        ["/bin/sh", "-c", "sleep 120 & wait"], start_new_session=True, env={"PATH": "/usr/bin:/bin"}
    )
    try:
        wait_until(lambda: len(group_of(victim.pid)) == 2, 10, "the victim's job")
        run_id = new_run_id()
        forged = ProcessRecord(
            pid=victim.pid, start_time=0, boot_id=boot_id(), uid=os.getuid(), kind="agent",
            name="alice",
        )  # fmt: skip
        orphan(tmp_path, run_id, forged, controller_alive=False)
        (report,) = reap_stale_runs(tmp_path)
        assert report.killed == ()
        assert victim.poll() is None and len(group_of(victim.pid)) == 2
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()


def group_of(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def test_a_process_that_does_not_name_the_run_is_not_ours_to_kill(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    other_run = new_run_id()
    record = ProcessRecord.of(sleeper.pid, "agent", "alice")
    assert record is not None
    orphan(tmp_path, other_run, record, controller_alive=False)
    assert reap_run(other_run, tmp_path).killed == ()
    assert sleeper.poll() is None


def test_a_run_whose_controller_is_alive_is_left_alone(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    run_id = sleeper.run_id  # type: ignore[attr-defined]
    record = ProcessRecord.of(sleeper.pid, "agent", "alice")
    assert record is not None
    orphan(tmp_path, run_id, record, controller_alive=True)
    (report,) = reap_stale_runs(tmp_path)
    assert report.skipped == "controller alive" and report.killed == ()
    assert sleeper.poll() is None
    assert (
        json.loads((tmp_path / run_id / "pids" / agent_record("alice")).read_text())["pid"]
        == sleeper.pid
    )


def test_a_run_starting_beside_another_is_never_reaped_while_its_record_is_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of a suite start together under one artifact root, and each start reaps the runs
    whose controller is gone. A starting run (its router's socket bound) must survive a reaper
    that runs at any moment of its controller record's publication. Published as before
    (``write_record`` into a new ``pids`` directory), the reaper found the directory without its
    record, deleted the run's sockets and pids, and the run's agents could not start (a CI run's
    suite test caught it: bwrap "Can't find source path .../sockets/router.sock")."""
    import controller.platforms.local.reap as local_reap

    run_id = new_run_id()
    run_dir = tmp_path / run_id
    (run_dir / "sockets").mkdir(parents=True)
    (run_dir / "sockets" / "router.sock").write_text("bound")
    record = ProcessRecord.of(os.getpid(), "controller")
    assert record is not None
    reaped: list[str] = []

    def concurrently(real):  # another run's start, reaping just before each step lands
        def step(*args: object) -> None:
            reaped.extend(r.run_id for r in reap_stale_runs(tmp_path) if r.skipped is None)
            real(*args)

        return step

    monkeypatch.setattr(local_reap.os, "replace", concurrently(os.replace))
    monkeypatch.setattr(local_reap.os, "rename", concurrently(os.rename))
    local_reap.write_controller_record(run_dir, record)
    assert reaped == [] and (run_dir / "sockets" / "router.sock").exists()
    assert ProcessRecord.read(run_dir / "pids" / "controller.json") == record
    # a retried start writes into the directory it finds, still without a reap
    local_reap.write_controller_record(run_dir, record)
    assert reaped == [] and (run_dir / "sockets" / "router.sock").exists()


def test_a_record_copied_from_another_run_directory_nominates_nothing(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """A handed-over folder's pid records name the live agent's pid, start time and run, but
    were written for the directory they came from, not for the one they were copied into."""
    run_id = sleeper.run_id  # type: ignore[attr-defined]
    record = ProcessRecord.of(sleeper.pid, "agent", "alice")
    assert record is not None
    elsewhere = tmp_path / "elsewhere" / run_id
    elsewhere.mkdir(parents=True)
    root = tmp_path / "artifacts"
    orphan(root, run_id, record, controller_alive=False)
    copied = dataclasses.replace(record, run_group=run_group(elsewhere) or "")
    write_record(root / run_id / "pids", copied)
    (report,) = reap_stale_runs(root)
    assert report.killed == ()
    assert sleeper.poll() is None
