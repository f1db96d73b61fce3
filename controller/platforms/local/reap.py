"""Pid records of a local run, and reaping what a dead run left behind.

Reaping acts only on what this artifact root's own run directory owns: its cgroups are named by
the directory's identity (``cgroup.run_group``), and its pid records count only beside a
controller record of ours from this boot. A directory that merely bears a live run's id (under
another root, or handed over) kills nothing.

An agent's processes are found through its cgroups (``local_cgroup``): membership is the
kernel's, so nothing an agent writes can point the reaper at another process. Where no cgroup
was available (``--unsandboxed`` without one), the reaper falls back to the pid records under
``<artifact_root>/<run_id>/pids/`` (pid, start time from ``/proc/<pid>/stat`` field 22, boot id).
Those records live where an unsandboxed agent could write, so they only nominate: a process is
killed only when it also carries the run's mark in its own environment (``SOCIETY_RUN_ID``, set
at launch and inherited by everything the agent starts) and belongs to our uid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from controller.platforms.local.cgroup import layout_or_none, run_group
from controller.platforms.local.launch import RUN_MARK
from controller.platforms.local.sockets import SOCKETS_DIR
from controller.platforms.local.trees import remove_tree
from controller.run.artifact_root import check_private
from controller.run.runid import RUN_ID_PATTERN

PIDS_DIR = "pids"
SANDBOXES_DIR = "sandboxes"
CONTROLLER_RECORD = "controller.json"


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """Who a process was when we started it: enough to recognise it again, never more."""

    pid: int
    start_time: int
    boot_id: str
    uid: int
    kind: Literal["controller", "agent"]
    name: str = ""
    """The agent's roster name."""
    run_group: str = ""
    """The run directory it was written for (``cgroup.run_group``): a record copied into
    another directory nominates nothing there."""

    @property
    def file_name(self) -> str:
        return CONTROLLER_RECORD if self.kind == "controller" else agent_record(self.name)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "pid": self.pid,
                "startTime": self.start_time,
                "bootId": self.boot_id,
                "uid": self.uid,
                "kind": self.kind,
                "name": self.name,
                "runGroup": self.run_group,
            }
        ).encode()

    @classmethod
    def read(cls, path: Path) -> ProcessRecord | None:
        try:
            body = json.loads(path.read_bytes())
            kind = body["kind"]
            if kind not in ("controller", "agent"):
                return None
            return cls(
                pid=int(body["pid"]),
                start_time=int(body["startTime"]),
                boot_id=str(body["bootId"]),
                uid=int(body["uid"]),
                kind=kind,
                name=str(body.get("name", "")),
                run_group=str(body.get("runGroup", "")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @classmethod
    def of(
        cls, pid: int, kind: Literal["controller", "agent"], name: str = "", run_group: str = ""
    ) -> ProcessRecord | None:
        start = process_start_time(pid)
        if start is None:
            return None
        return cls(pid, start, boot_id(), os.getuid(), kind, name, run_group)

    def is_alive(self) -> bool:
        """Whether this very process (not a reuse of its pid) still exists."""
        return (
            self.boot_id == boot_id()
            and process_start_time(self.pid) == self.start_time
            and process_uid(self.pid) == self.uid == os.getuid()
        )


def agent_record(name: str) -> str:
    """The pid record's file name for agent ``name`` (roster names hold no dots)."""
    return f"agent.{name}.json"


@dataclass(frozen=True, slots=True)
class ReapReport:
    run_id: str
    killed: tuple[int, ...]
    skipped: str | None = None
    """Why the run was left alone (its controller is alive)."""


def write_record(directory: Path, record: ProcessRecord) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / record.file_name
    temporary = target.with_suffix(".json.tmp")
    temporary.write_bytes(record.to_json())
    os.replace(temporary, target)


def write_controller_record(run_dir: Path, record: ProcessRecord) -> None:
    """The run's controller record, published so that the run's ``pids`` directory never exists
    without it: another run starting under the same artifact root reaps every run whose pids
    directory names no live controller (``reap_stale_runs``), and would otherwise reap this one
    between the directory's creation and the record's (its sockets, its agents' sandboxes)."""
    pids = run_dir / PIDS_DIR
    if pids.is_dir():  # a retried start, or a directory that an older release left
        write_record(pids, record)
        return
    staging = run_dir / f".{PIDS_DIR}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    write_record(staging, record)
    try:
        os.rename(staging, pids)  # the directory appears with its record in it
    except OSError:  # made meanwhile (not by a controller of this run): write into it
        write_record(pids, record)
        shutil.rmtree(staging, ignore_errors=True)


def reap_run(run_id: str, artifact_root: str | Path) -> ReapReport:
    """Kill every process of the run's agents, remove their cgroups, delete the sandboxes.

    Safe to call any number of times, with the run's controller alive or dead.
    """
    run_dir = Path(artifact_root) / run_id
    pids = run_dir / PIDS_DIR
    killed: list[int] = []
    layout = layout_or_none()
    group = run_group(run_dir)  # this directory's run only, never another root's of that id
    if layout is not None and group is not None:
        killed.extend(layout.destroy(group))
    for path in sorted(pids.glob("*.json")) if _owned(pids) else []:
        record = ProcessRecord.read(path)
        if record is not None and record.kind == "agent" and group and record.run_group == group:
            killed.extend(_kill_agent(record, run_id))
    remove_tree(run_dir / SANDBOXES_DIR)  # working dirs hold secrets files, and agents' trees
    remove_tree(run_dir / SOCKETS_DIR)
    remove_tree(pids)
    return ReapReport(run_id, tuple(killed))


def _owned(pids: Path) -> bool:
    """Whether the run's controller record is one of ours from this boot: pid records of a
    folder that some other controller (or no controller) wrote nominate nothing."""
    record = ProcessRecord.read(pids / CONTROLLER_RECORD) if pids.is_dir() else None
    return record is not None and record.uid == os.getuid() and record.boot_id == boot_id()


def reap_stale_runs(artifact_root: str | Path) -> list[ReapReport]:
    """Reap every run under ``artifact_root`` whose controller process is gone; raises
    ``ArtifactRootUnsafe`` for a root that is not this user's alone."""
    root = Path(artifact_root)
    check_private(root)
    reports: list[ReapReport] = []
    if not root.is_dir():
        return reports
    for run_dir in sorted(root.iterdir()):
        if not RUN_ID_PATTERN.match(run_dir.name):
            continue
        pids = run_dir / PIDS_DIR
        if not pids.is_dir() and not (run_dir / SANDBOXES_DIR).exists():
            continue
        controller = ProcessRecord.read(pids / CONTROLLER_RECORD)
        if controller is not None and controller.is_alive():
            reports.append(ReapReport(run_dir.name, (), skipped="controller alive"))
            continue
        reports.append(reap_run(run_dir.name, root))
    return reports


def _kill_agent(record: ProcessRecord, run_id: str) -> list[int]:
    """SIGKILL the agent and its process group: only processes that are still ours and the run's.

    The record only nominates (an unsandboxed agent can rewrite it); each process must carry the
    run's mark in its own environment, belong to our uid, and not predate the record.
    """
    killed: list[int] = []
    if record.boot_id != boot_id() or record.uid != os.getuid():
        return killed
    # the agent led its own session; anything it forked kept the group id
    leader = [record.pid] if record.is_alive() else []
    for pid in [*leader, *_group_members(record.pid)]:
        start = process_start_time(pid)
        if (
            start is not None
            and start >= record.start_time
            and process_uid(pid) == os.getuid()
            and carries_run_mark(pid, run_id)
        ):
            _signal(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def carries_run_mark(pid: int, run_id: str) -> bool:
    """Whether the process was started with ``SOCIETY_RUN_ID=<run_id>`` in its environment."""
    try:
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{RUN_MARK}={run_id}".encode() in environment


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == pgid:
            continue
        stat = _stat_fields(int(entry.name))
        if stat is not None and stat[2] == str(pgid):
            members.append(int(entry.name))
    return members


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...]."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or ``None`` when it does not exist."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


_BOOT_ID: str | None = None


def boot_id() -> str:
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            _BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            _BOOT_ID = "unknown"
    return _BOOT_ID
