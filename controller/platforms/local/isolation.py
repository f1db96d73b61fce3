"""How the local profile isolates a run's agents, and how one agent's processes are signalled."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio

import controller.settings as settings
from controller.agents.runtime import SandboxAccess
from controller.agents.termination import Observation, ProcessExit
from controller.events.run import AgentIsolation
from controller.platforms.local.cgroup import (
    DEFAULT_PIDS_MAX,
    AgentCgroup,
    CgroupLayout,
    layout_or_none,
)
from controller.platforms.local.namespaces import SANDBOX_NAME
from controller.platforms.local.sandbox import Bubblewrap, SandboxUnavailable
from controller.run.platform import Sandbox

TEMPLATE_ENV = settings.LOCAL_TEMPLATE.name
"""Set to 1 (or pass ``LocalPlatform(template=True)``) to fork sandboxed agents from a template."""
TEMPLATE_TOOL = "template fork"
SANDBOX_PROCESSES = ("bwrap", SANDBOX_NAME.decode())
"""The names of a sandbox's own processes (bwrap's, or a template fork's outer one and pid 1)."""


class AgentProcess(Protocol):
    """An agent's outermost process: a child (``anyio.abc.Process``) or a template's fork."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LocalIsolation:
    """How this run's agents are isolated: a sandbox (or ``None``: unsandboxed) and cgroups."""

    sandbox: Bubblewrap | None
    cgroups: CgroupLayout | None
    pids_max: int = DEFAULT_PIDS_MAX
    template: bool = False
    """Sandboxed agents are forked from a template and enter bwrap's sandbox in-process."""

    @classmethod
    def detect(cls, *, sandboxed: bool, template: bool = False) -> LocalIsolation:
        """Sandboxed: bwrap and cgroups, or raise (with the next step). Else cgroups if any.
        ``template`` holds only as root with cgroups (the forks enter them by themselves)."""
        if not sandboxed:
            return cls(None, layout_or_none())
        cgroups = CgroupLayout.detect()
        if template and os.geteuid() != 0:
            raise SandboxUnavailable(
                "a template forks sandboxed agents only as root (it sets up their namespaces "
                f"itself); run as root, or unset {TEMPLATE_ENV} (bwrap starts each agent)",
                reason="sandbox-unavailable",
            )
        return cls(Bubblewrap.probe(), cgroups, template=template)

    def as_event(self) -> AgentIsolation:
        return AgentIsolation(
            profile="local",
            sandbox="bubblewrap" if self.sandbox is not None else "none",
            tool=self._tool(),
            uid=None if self.sandbox is not None else os.getuid(),  # sandboxed: one per agent
            cgroups=self.cgroups.version if self.cgroups is not None else "none",
            pids_max=self.pids_max if self.cgroups is not None else None,
        )

    def _tool(self) -> str | None:
        if self.sandbox is None:
            return None
        if self.template:
            return f"{TEMPLATE_TOOL} (the sandbox of {self.sandbox.version})"
        return self.sandbox.version


class LocalSandbox(Sandbox):
    def __init__(
        self,
        name: str,
        access: SandboxAccess,
        process: AgentProcess,
        home: Path,
        cgroup: AgentCgroup | None,
        sandboxed: bool,
        term_grace_s: float = 2.0,
    ) -> None:
        self.name = name
        self.access = access
        self.process = process
        self.home = home
        self.cgroup = cgroup
        self.sandboxed = sandboxed
        self.term_grace_s = term_grace_s
        """How long its program may take to exit after SIGTERM (its descriptor's)."""

    @property
    def workdir(self) -> Path:
        return self.home / "work"

    @property
    def log(self) -> Path:
        return self.home / "output.log"

    def signal(self, signum: int) -> None:
        """Signal the agent: in a sandbox, every process but bwrap's own (it would answer any
        signal by killing the rest at once); unsandboxed, its process group and its cgroup."""
        if self.process.returncode is not None:
            return  # a reaped pid may belong to someone else by now
        if self.cgroup is not None and (self.sandboxed or signum == signal.SIGKILL):
            for pid in self.cgroup.members():
                if not (self.sandboxed and signum != signal.SIGKILL and _is_bwrap(pid)):
                    _kill(pid, signum)
        if not self.sandboxed:
            signal_group(self.process, signum)


async def reap_child(
    process: AgentProcess, exited: Observation[ProcessExit], sandboxed: bool
) -> None:
    try:
        returncode = await process.wait()
        if sandboxed and 128 < returncode <= 128 + 64:
            returncode = 128 - returncode  # bwrap reports its command's signal as 128 + signal
        exited.set(ProcessExit.from_returncode(returncode))
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


def _is_bwrap(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in SANDBOX_PROCESSES
    except OSError:
        return False


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(process: AgentProcess, signum: int) -> None:
    """Signal the agent's process group (it leads its own session), unless it was reaped already:
    a reaped pid may belong to someone else by now."""
    if process.returncode is not None:
        return
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
