"""Per-agent cgroups of the local profile: a pids limit, a memory limit, and kill-by-membership.

Each agent gets ``society/<run group>/<agent>`` in the cgroup v1 ``pids`` and ``memory`` hierarchies
(root may write them), or under the controller's own delegated cgroup v2 (a desktop session:
``systemd-run --user --scope -p Delegate=yes``). Its first process joins the group before it
execs anything, so every process it ever starts is a member; killing the members is how a run is
reaped. Membership lives in the kernel, which no agent can write: nothing here trusts a file.

A run's group is named by its run id and the identity of its run directory (``run_group``):
cgroups are global to the machine, so a directory that merely bears a live run's id, under
another artifact root, names no group of that run and reaping it kills nothing.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from controller.run.platform import PlatformError

CGROUP_FS = Path("/sys/fs/cgroup")
GROUP = "society"
DEFAULT_PIDS_MAX = 256
"""Processes and threads one agent may hold at once."""
_KILL_ROUNDS = 200


def run_group(run_dir: Path) -> str | None:
    """``<run_id>.<16 hex>``: the run id and its directory's device and inode, or ``None`` when
    there is no such directory (then no group of it can exist)."""
    try:
        info = os.stat(run_dir, follow_symlinks=False)
    except OSError:
        return None
    identity = hashlib.sha256(f"{info.st_dev}:{info.st_ino}".encode()).hexdigest()[:16]
    return f"{run_dir.name}.{identity}"


class CgroupUnavailable(PlatformError):
    """No writable pids and memory cgroup for the run's agents; the message says what to do."""

    reason = "cgroup-unavailable"


@dataclass(frozen=True, slots=True)
class AgentCgroup:
    """One agent's groups: one directory per hierarchy (v1) or one directory (v2)."""

    directories: tuple[Path, ...]

    @property
    def procs_files(self) -> tuple[str, ...]:
        return tuple(str(d / "cgroup.procs") for d in self.directories)

    def members(self) -> set[int]:
        found: set[int] = set()
        for name in self.procs_files:
            try:
                found.update(int(line) for line in Path(name).read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def kill(self) -> list[int]:
        """SIGKILL every member until none is left (a fork bomb is bounded by ``pids.max``)."""
        killed: list[int] = []
        for _ in range(_KILL_ROUNDS):
            members = self.members()
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.005)
        return killed

    def remove(self) -> None:
        for directory in self.directories:
            for _ in range(100):  # a killed member leaves the group once the kernel reaped it
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """Where this machine lets the controller create agent cgroups."""

    version: str
    """``"v1"`` or ``"v2"``."""
    bases: tuple[Path, ...]
    """The directories under which ``<run group>/<agent>`` groups are made (one per hierarchy)."""

    @classmethod
    def detect(cls) -> CgroupLayout:
        """The v1 pids+memory hierarchies if writable, else a delegated v2 group; or raise."""
        pids, memory = CGROUP_FS / "pids", CGROUP_FS / "memory"
        if _writable(pids) and _writable(memory):
            return cls("v1", (pids / GROUP, memory / GROUP))
        v2 = _delegated_v2()
        if v2 is not None:
            return cls("v2", (v2,))
        raise CgroupUnavailable(
            "the local sandbox needs a writable pids and memory cgroup (cgroup v1 hierarchies "
            "as root, or a delegated cgroup v2: start society under `systemd-run --user --scope "
            "-p Delegate=yes`); or opt out with --unsandboxed (the ledger records it)",
            reason="cgroup-unavailable",
        )

    def run_directories(self, group: str) -> tuple[Path, ...]:
        return tuple(base / group for base in self.bases)

    def create(self, group: str, agent: str, *, pids_max: int, memory_bytes: int) -> AgentCgroup:
        """Make the agent's groups with their limits (raises ``OSError``)."""
        directories = tuple(d / agent for d in self.run_directories(group))
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
        if self.version == "v1":
            pids, memory = directories
            (pids / "pids.max").write_text(str(pids_max))
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
        else:
            (directory,) = directories
            (directory / "pids.max").write_text(str(pids_max))
            (directory / "memory.max").write_text(str(memory_bytes))
            (directory / "memory.swap.max").write_text("0")
        return AgentCgroup(directories)

    def agents_of(self, group: str) -> list[AgentCgroup]:
        per_agent: dict[str, list[Path]] = {}
        for run_directory in self.run_directories(group):
            for child in sorted(run_directory.iterdir()) if run_directory.is_dir() else []:
                if child.is_dir():
                    per_agent.setdefault(child.name, []).append(child)
        return [AgentCgroup(tuple(d)) for d in per_agent.values()]

    def runs(self) -> list[str]:
        """Run groups that still exist here."""
        names: set[str] = set()
        for base in self.bases:
            if base.is_dir():
                names.update(p.name for p in base.iterdir() if p.is_dir())
        return sorted(names)

    def destroy(self, group: str) -> list[int]:
        """Kill every member of the run's groups, then remove the groups; idempotent."""
        killed: list[int] = []
        for agent in self.agents_of(group):
            killed.extend(agent.kill())
            agent.remove()
        AgentCgroup(self.run_directories(group)).remove()
        for base in self.bases:
            try:
                base.rmdir()  # only once no run of any artifact root uses it
            except OSError:
                pass
        return killed


def layout_or_none() -> CgroupLayout | None:
    try:
        return CgroupLayout.detect()
    except CgroupUnavailable:
        return None


def _writable(hierarchy: Path) -> bool:
    return (hierarchy / "cgroup.procs").is_file() and os.access(hierarchy, os.W_OK)


def _delegated_v2() -> Path | None:
    """``<own cgroup>/society`` when this process's v2 group is delegated to it with pids+memory.

    The controller first moves itself into a leaf (``<own>/society-controller``), since v2 lets a
    group with members enable no controllers for its children.
    """
    if not (CGROUP_FS / "cgroup.controllers").is_file():
        return None
    try:
        line = next(
            entry
            for entry in Path("/proc/self/cgroup").read_text().splitlines()
            if entry.startswith("0::")
        )
    except (OSError, StopIteration):
        return None
    own = CGROUP_FS / line[3:].lstrip("/")
    if own.name == "society-controller":
        own = own.parent
    try:
        available = set((own / "cgroup.controllers").read_text().split())
        if not {"pids", "memory"} <= available or not os.access(own, os.W_OK):
            return None
        enabled = set((own / "cgroup.subtree_control").read_text().split())
        if not {"pids", "memory"} <= enabled:
            leaf = own / "society-controller"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
            (own / "cgroup.subtree_control").write_text("+pids +memory")
        base = own / GROUP
        base.mkdir(exist_ok=True)
        (base / "cgroup.subtree_control").write_text("+pids +memory")
    except OSError:
        return None
    return base
