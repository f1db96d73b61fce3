"""The local profile: one child process per roster agent, admitted against a local budget.

Layout under ``<artifact_root>/<run_id>/``: ``ledger/<ref>/`` (the kernel's), ``sandboxes/<agent>/``
(``work/`` is the agent's working directory, ``output.log`` its stdout and stderr; deleted at
teardown), ``artifacts/<agent>/`` (what harvest copied), ``pids/`` (pid records for the reaper).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import anyio
from anyio.abc import Process, TaskGroup

from controller.agents.runtime import Harvest, RuntimeDescriptor, SandboxAccess
from controller.agents.termination import Observation, ProcessExit
from controller.events.run import AgentRequest, Capacity
from controller.platform.local_harvest import copy_declared
from controller.platform.local_launch import (
    launcher_command,
    scrubbed_environment,
    write_files,
    write_private,
)
from controller.platform.local_reap import (
    PIDS_DIR,
    SANDBOXES_DIR,
    ProcessRecord,
    ReapReport,
    agent_record,
    reap_run,
    reap_stale_runs,
    write_record,
)
from controller.run.platform import (
    Admission,
    AdmissionRefused,
    AgentLaunch,
    HarvestedItem,
    Platform,
    PlatformSession,
    RunPlacement,
    Sandbox,
    SandboxStartError,
)

__all__ = [
    "LocalCapacity",
    "LocalPlatform",
    "ReapReport",
    "reap_run",
    "reap_stale_runs",
]

_TERM_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class LocalCapacity:
    """The local budget the complete roster is admitted against."""

    cpu: float
    memory_mib: int
    agents: int = 256

    @classmethod
    def detect(cls) -> LocalCapacity:
        """This machine's usable cores and memory (80% of it), and 256 agents."""
        try:
            cores = float(len(os.sched_getaffinity(0)))
        except AttributeError:
            cores = float(os.cpu_count() or 1)
        return cls(cpu=cores, memory_mib=int(_memory_total_mib() * 0.8))

    def as_event(self) -> Capacity:
        return Capacity(cpu=self.cpu, memory_mib=self.memory_mib, agents=self.agents)


class LocalPlatform(Platform):
    """Child processes on this machine; see the module docstring for the directory layout."""

    profile: ClassVar[str] = "local"
    router_host = "127.0.0.1"

    def __init__(self, capacity: LocalCapacity | None = None) -> None:
        self.capacity = capacity or LocalCapacity.detect()

    def admit(self, roster: Mapping[str, RuntimeDescriptor]) -> Admission:
        requests = tuple(
            AgentRequest(
                agent=name,
                runtime=type(d).runtime,
                cpu=d.resources.cpu,
                memory_mib=d.resources.memory_mib,
            )
            for name, d in roster.items()
        )
        requested = Capacity(
            cpu=round(sum(r.cpu for r in requests), 6),
            memory_mib=sum(r.memory_mib for r in requests),
            agents=len(requests),
        )
        admission = Admission(requests, requested, self.capacity.as_event())
        budget = self.capacity
        short = []
        if requested.agents > budget.agents:
            short.append(("too-many-agents", f"{requested.agents} agents > {budget.agents}"))
        if requested.cpu > budget.cpu:
            short.append(("insufficient-cpu", f"{requested.cpu:g} cores > {budget.cpu:g}"))
        if requested.memory_mib > budget.memory_mib:
            short.append(
                ("insufficient-memory", f"{requested.memory_mib} MiB > {budget.memory_mib} MiB")
            )
        if short:
            raise AdmissionRefused(
                f"the roster does not fit the local budget: {'; '.join(d for _, d in short)}; "
                f"shrink the roster or its resource requests",
                reason=short[0][0],
                admission=admission,
            )
        return admission

    @asynccontextmanager
    async def session(self, placement: RunPlacement) -> AsyncIterator[PlatformSession]:
        reap_stale_runs(placement.run_dir.parent)  # what dead runs left on this machine
        record = ProcessRecord.of(os.getpid(), "controller")
        if record is not None:
            await anyio.to_thread.run_sync(write_record, placement.run_dir / PIDS_DIR, record)
        watch_read, watch_write = os.pipe()  # the controller holds the only write end
        try:
            async with anyio.create_task_group() as tasks:
                session = LocalSession(placement, tasks, watch_read)
                try:
                    yield session
                finally:
                    with anyio.CancelScope(shield=True):
                        await session.teardown()
                    tasks.cancel_scope.cancel()
        finally:
            os.close(watch_write)
            os.close(watch_read)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(reap_run, placement.run_id, placement.run_dir.parent)


class LocalSandbox(Sandbox):
    def __init__(self, name: str, access: SandboxAccess, process: Process, home: Path) -> None:
        self.name = name
        self.access = access
        self.process = process
        self.home = home

    @property
    def workdir(self) -> Path:
        return self.home / "work"

    @property
    def log(self) -> Path:
        return self.home / "output.log"


class LocalSession(PlatformSession):
    def __init__(self, placement: RunPlacement, tasks: TaskGroup, watch_fd: int) -> None:
        self.placement = placement
        self._tasks = tasks
        self._watch_fd = watch_fd
        self._sandboxes: list[LocalSandbox] = []

    async def start(self, launch: AgentLaunch) -> Sandbox:
        placement = self.placement
        home = placement.run_dir / SANDBOXES_DIR / launch.name
        workdir = home / "work"
        descriptor = launch.descriptor
        credentials = _resolve_credentials(launch)
        try:
            await anyio.to_thread.run_sync(_prepare, workdir, descriptor, launch, credentials)
        except OSError as exc:
            raise SandboxStartError(
                f"cannot prepare the working directory of {launch.name}: {exc}",
                reason="workdir-failed",
            ) from exc
        listener = socket.create_server(("127.0.0.1", 0))
        port: int = listener.getsockname()[1]
        log = await anyio.to_thread.run_sync(open, home / "output.log", "ab")
        try:
            env = scrubbed_environment(
                descriptor,
                agent=launch.name,
                workdir=workdir,
                router_url=placement.router_url,
                bridge_port=port,
                bridge_fd=listener.fileno(),
                seed=placement.seed,
                router_ca_file=placement.router_ca_file,
            )
            command = launcher_command(placement.run_id, launch.name, self._watch_fd, descriptor)
            process = await anyio.open_process(
                command,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(self._watch_fd, listener.fileno()),
            )
        except OSError as exc:
            raise SandboxStartError(
                f"cannot start {launch.name} ({' '.join(descriptor.command)}): {exc}",
                reason="spawn-failed",
            ) from exc
        finally:
            listener.close()  # the child holds its own copy
            log.close()
        record = ProcessRecord.of(process.pid, "agent", launch.name)
        if record is not None:
            write_record(placement.run_dir / PIDS_DIR, record)
        exited: Observation[ProcessExit] = Observation()
        access = SandboxAccess(launch.name, "127.0.0.1", port, launch.bridge_token, exited)
        sandbox = LocalSandbox(launch.name, access, process, home)
        self._sandboxes.append(sandbox)
        self._tasks.start_soon(_reap_child, process, exited)
        return sandbox

    async def stop(self, sandbox: Sandbox, *, grace_s: float) -> ProcessExit:
        assert isinstance(sandbox, LocalSandbox)
        exited = sandbox.access.exit
        with anyio.move_on_after(grace_s):
            return await exited
        _signal_group(sandbox.process, signal.SIGTERM)
        with anyio.move_on_after(_TERM_GRACE_S):
            return await exited
        _signal_group(sandbox.process, signal.SIGKILL)
        return await exited

    async def harvest(self, sandbox: Sandbox, declared: Harvest) -> list[HarvestedItem]:
        assert isinstance(sandbox, LocalSandbox)
        target = self.placement.run_dir / "artifacts" / sandbox.name
        return await anyio.to_thread.run_sync(
            copy_declared, sandbox.workdir, sandbox.log, declared, target, self.placement.run_dir
        )

    async def teardown(self) -> None:
        """Kill whatever still runs, wait for it, delete the sandboxes (they hold secrets)."""
        for sandbox in self._sandboxes:
            _signal_group(sandbox.process, signal.SIGKILL)
        with anyio.move_on_after(10):
            for sandbox in self._sandboxes:
                await sandbox.access.exit
        sandboxes = self.placement.run_dir / SANDBOXES_DIR
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(sandboxes, ignore_errors=True))
        pids = self.placement.run_dir / PIDS_DIR
        for sandbox in self._sandboxes:
            if sandbox.access.exit.done:
                (pids / agent_record(sandbox.name)).unlink(missing_ok=True)


async def _reap_child(process: Process, exited: Observation[ProcessExit]) -> None:
    try:
        returncode = await process.wait()
        exited.set(ProcessExit.from_returncode(returncode))
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


def _prepare(
    workdir: Path, descriptor: RuntimeDescriptor, launch: AgentLaunch, credentials: dict[str, str]
) -> None:
    workdir.mkdir(parents=True, exist_ok=False)
    write_files(workdir, descriptor.files)
    write_private(workdir / ".society" / "secrets.json", launch.secrets(credentials).to_json())


def _resolve_credentials(launch: AgentLaunch) -> dict[str, str]:
    values: dict[str, str] = {}
    missing: list[str] = []
    for name, ref in launch.descriptor.credentials.items():
        value = os.environ.get(ref.env) if ref.env else None
        if value is None:
            missing.append(f"{name} (env {ref.env})" if ref.env else f"{name} (no env reference)")
        else:
            values[name] = value
    if missing:
        raise SandboxStartError(
            f"credentials for {launch.name} are not available to the local profile: "
            f"{', '.join(missing)}; set them in the controller's environment",
            reason="credential-missing",
        )
    return values


def _signal_group(process: Process, signum: int) -> None:
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


def _memory_total_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4096
