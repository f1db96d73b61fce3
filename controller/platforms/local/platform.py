"""The local profile: one sandboxed child process per roster agent, admitted against a local budget.

Each agent runs in its own bubblewrap sandbox (``local_sandbox``) inside its own cgroups
(``local_cgroup``); ``--unsandboxed`` (``SOCIETY_UNSANDBOXED=1``) runs it as a plain child process
instead, and the ledger records which (``AgentIsolation``). As root, ``SOCIETY_LOCAL_TEMPLATE=1``
(``template=True``) forks each sandboxed agent from a pre-imported template (``local_template``)
that enters the same sandbox in-process (``local_namespaces``); the ledger's ``tool`` says so.

Layout under ``<artifact_root>/<run_id>/``: ``ledger/<ref>/`` (the kernel's), ``sandboxes/<agent>/``
(``work/`` is the agent's working directory, ``output.log`` its stdout and stderr, ``bridge.sock``
its bridge; deleted at teardown), ``sockets/`` (the router's and model gateway's Unix sockets),
``artifacts/<agent>/`` (what harvest copied), ``pids/`` (pid records for the reaper).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup

from controller.agents.runtime import Harvest, RuntimeDescriptor, SandboxAccess
from controller.agents.termination import Observation, ProcessExit
from controller.platforms.local.capacity import LocalCapacity
from controller.platforms.local.cgroup import run_group
from controller.platforms.local.harvest import copy_declared
from controller.platforms.local.isolation import (
    AgentProcess,
    LocalIsolation,
    LocalSandbox,
    reap_child,
)
from controller.platforms.local.launch import (
    MIB,
    Spawn,
    agent_module_path,
    agent_python_path,
    fresh_session_keyring,
    host_environment,
    in_cgroups,
    launcher_command,
    prepare_workdir,
    resolve_credentials,
    scrubbed_environment,
)
from controller.platforms.local.reap import (
    PIDS_DIR,
    SANDBOXES_DIR,
    ProcessRecord,
    ReapReport,
    agent_record,
    reap_run,
    reap_stale_runs,
    write_controller_record,
    write_record,
)
from controller.platforms.local.sandbox import (
    HOME,
    MODEL_GATEWAY_SOCKET,
    ROUTER_SOCKET,
    AgentUids,
    Bubblewrap,
    python_executable,
    seal,
    unsandboxed_requested,
)
from controller.platforms.local.sockets import (
    SOCKETS_DIR,
    DirectoryHandle,
    bind_unix,
    relay_to_tcp,
)
from controller.platforms.local.template import (
    LocalTemplates,
    launcher_plan,
    template_requested,
)
from controller.platforms.local.trees import remove_tree
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
    roster_requests,
)
from controller.services import LocalModelStarter
from ledger import Event
from society_sandbox import boot
from society_sandbox.packages import unmet
from society_sandbox.runtimes.llm import GATEWAY_SOCKET_VARIABLE, GATEWAY_URL_VARIABLE

__all__ = [
    "LocalCapacity",
    "LocalIsolation",
    "LocalPlatform",
    "ReapReport",
    "reap_run",
    "reap_stale_runs",
]


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
"""Where the run's own services listen; the model-gateway relay connects nowhere else."""


class LocalPlatform(Platform):
    """Child processes on this machine; see the module docstring for the directory layout.

    ``sandboxed=None`` reads the choice from ``SOCIETY_UNSANDBOXED`` (default: sandboxed).
    """

    profile: ClassVar[str] = "local"
    router_host = "127.0.0.1"

    def __init__(
        self,
        capacity: LocalCapacity | None = None,
        *,
        sandboxed: bool | None = None,
        template: bool | None = None,
    ) -> None:
        self.capacity = capacity or LocalCapacity.detect()
        self.sandboxed = not unsandboxed_requested() if sandboxed is None else sandboxed
        self.template = template_requested() if template is None else template
        """Fork sandboxed agents from a pre-imported template (``local_template``), as root."""
        self._isolation: LocalIsolation | None = None

    @property
    def isolation(self) -> LocalIsolation:
        """Checked once; raises ``SandboxUnavailable`` or ``CgroupUnavailable`` (the next step)."""
        if self._isolation is None:
            self._isolation = LocalIsolation.detect(
                sandboxed=self.sandboxed, template=self.template
            )
        return self._isolation

    def run_evidence(self) -> Sequence[Event]:
        return (self.isolation.as_event(),)

    async def reap(self, run_id: str, artifact_root: Path) -> None:
        """Kill what the run left on this machine (agents and their process groups)."""
        await anyio.to_thread.run_sync(reap_run, run_id, artifact_root)

    def local_model(self) -> LocalModelStarter:
        from controller.platforms.local_model import start_local_model

        return start_local_model

    def router_socket(self, run_dir: Path) -> socket.socket | None:
        if self.isolation.sandbox is None:
            return None
        directory = run_dir / SOCKETS_DIR
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return bind_unix(directory, "router.sock", mode=0o666)  # reachable only through a bind

    def admit(self, roster: Mapping[str, RuntimeDescriptor]) -> Admission:
        requests, requested = roster_requests(roster)
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
        self._check_packages(roster, admission)
        return admission

    def _check_packages(
        self, roster: Mapping[str, RuntimeDescriptor], admission: Admission
    ) -> None:
        """Every agent's declared Python packages are in the environment it runs in."""
        declared = {name: d.packages for name, d in roster.items() if d.packages}
        if not declared:
            return
        python = python_executable() if self.sandboxed else sys.executable
        path = agent_module_path(python, agent_python_path())
        missing = {name: unmet(packages, path) for name, packages in declared.items()}
        shown = "; ".join(
            f"{name} needs {', '.join(map(str, found))}" for name, found in missing.items() if found
        )
        if shown:
            wanted = sorted({item.requirement for found in missing.values() for item in found})
            install = " ".join(f"'{requirement}'" for requirement in wanted)
            raise AdmissionRefused(
                f"the local agents' Python ({python}) lacks packages the roster declares: "
                f"{shown}; install them there (`{python} -m pip install {install}`), or drop "
                f"them from the agents' packages=...",
                reason="package-missing",
                admission=admission,
            )

    @asynccontextmanager
    async def session(self, placement: RunPlacement) -> AsyncIterator[PlatformSession]:
        reap_stale_runs(placement.run_dir.parent)  # what dead runs left on this machine
        os.chmod(placement.run_dir, 0o700)  # its ledger and artifacts: the submitter's only
        record = ProcessRecord.of(
            os.getpid(), "controller", run_group=run_group(placement.run_dir) or ""
        )
        if record is not None:
            await anyio.to_thread.run_sync(write_controller_record, placement.run_dir, record)
        watch_read, watch_write = os.pipe()  # the controller holds the only write end
        try:
            async with anyio.create_task_group() as tasks:
                session = LocalSession(
                    placement, tasks, watch_read, self.isolation, template=self.isolation.template
                )
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


@dataclass
class _RunSockets:
    """The run's socket directory and the gateway relay, made when the first agent needs it."""

    directory: Path
    gateway: Path | None = None
    handles: list[DirectoryHandle] = field(default_factory=list)


class LocalSession(PlatformSession):
    def __init__(
        self,
        placement: RunPlacement,
        tasks: TaskGroup,
        watch_fd: int,
        isolation: LocalIsolation,
        *,
        template: bool = False,
    ) -> None:
        self.placement = placement
        self._templates = LocalTemplates(placement.run_id, tasks) if template else None
        self._tasks = tasks
        self._watch_fd = watch_fd
        self._isolation = isolation
        self._sockets = _RunSockets(placement.run_dir / SOCKETS_DIR)
        self._sandboxes: list[LocalSandbox] = []
        self._uids = AgentUids(placement.run_id)
        group = run_group(placement.run_dir)
        assert group is not None, "the run directory exists before its session"
        self._group = group

    async def start(self, launch: AgentLaunch) -> Sandbox:
        placement = self.placement
        isolation = self._isolation
        bwrap = isolation.sandbox
        home = placement.run_dir / SANDBOXES_DIR / launch.name
        workdir = home / "work"
        descriptor = launch.descriptor
        credentials = resolve_credentials(launch)
        uid = self._uids.take() if bwrap is not None else None
        owner = uid if os.geteuid() == 0 else None
        try:
            await anyio.to_thread.run_sync(
                prepare_workdir, workdir, descriptor, launch, credentials, owner
            )
            cgroup = (
                isolation.cgroups.create(
                    self._group,
                    launch.name,
                    pids_max=isolation.pids_max,
                    memory_bytes=descriptor.resources.memory_limit_mib * MIB,
                )
                if isolation.cgroups is not None
                else None
            )
        except OSError as exc:
            raise SandboxStartError(
                f"cannot prepare the working directory or cgroup of {launch.name}: {exc}",
                reason="workdir-failed",
            ) from exc
        procs = cgroup.procs_files if cgroup is not None else ()
        spawn = (
            self._sandboxed(bwrap, launch, home, procs, uid)
            if bwrap is not None and uid is not None
            else self._unsandboxed(launch, home, procs)
        )
        listener = spawn.listener
        log = await anyio.to_thread.run_sync(open, home / "output.log", "ab")
        try:
            process: AgentProcess
            if spawn.plan is not None and self._templates is not None:
                plan = {
                    **spawn.plan,
                    "environment": spawn.environment,
                    "bridge_fd": listener.fileno(),
                }
                process = await self._templates.fork(
                    descriptor,
                    plan,
                    log,
                    listener,
                    python=spawn.python,
                    python_path=spawn.python_path,
                )
            else:
                process = await anyio.open_process(
                    spawn.command,
                    cwd=spawn.cwd,
                    env=spawn.environment
                    if spawn.host_environment is None
                    else spawn.host_environment,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=spawn.pass_fds,
                )
        except OSError as exc:
            raise SandboxStartError(
                f"cannot start {launch.name} ({' '.join(descriptor.command)}): {exc}",
                reason="spawn-failed",
            ) from exc
        finally:
            listener.close()  # the child holds its own copy
            for fd in spawn.owned_fds:
                os.close(fd)
            log.close()
        record = ProcessRecord.of(process.pid, "agent", launch.name, self._group)
        if record is not None:
            write_record(placement.run_dir / PIDS_DIR, record)
        exited: Observation[ProcessExit] = Observation()
        access = SandboxAccess(
            launch.name,
            spawn.bridge_host,
            spawn.bridge_port,
            launch.bridge_token,
            exited,
            bridge_path=spawn.bridge_path,
        )
        sandbox = LocalSandbox(
            launch.name,
            access,
            process,
            home,
            cgroup,
            bwrap is not None,
            term_grace_s=descriptor.term_grace_s,
        )
        self._sandboxes.append(sandbox)
        self._tasks.start_soon(reap_child, process, exited, bwrap is not None)
        return sandbox

    def _sandboxed(
        self, bwrap: Bubblewrap, launch: AgentLaunch, home: Path, procs: Sequence[str], uid: int
    ) -> Spawn:
        """bwrap around the launcher, as ``uid`` in a fresh session keyring; the bridge on a Unix
        socket, the run's sockets bound in."""
        descriptor = launch.descriptor
        listener = bind_unix(home, "bridge.sock")
        handle = DirectoryHandle(home)
        self._sockets.handles.append(handle)
        binds = [(self._sockets.directory / "router.sock", ROUTER_SOCKET)]
        variables = {boot.ROUTER_SOCKET: ROUTER_SOCKET}
        if GATEWAY_URL_VARIABLE in descriptor.environment:
            gateway = self._gateway(descriptor.environment[GATEWAY_URL_VARIABLE])
            binds.append((gateway, MODEL_GATEWAY_SOCKET))
            variables[GATEWAY_SOCKET_VARIABLE] = MODEL_GATEWAY_SOCKET
        python = python_executable()
        inner = launcher_command(
            self.placement.run_id, launch.name, descriptor, watch_fd=None, python=python
        )
        environment = self._environment(
            launch, Path(HOME), listener.fileno(), 0, python, bwrap.python_path, variables
        )
        plan: dict[str, object] | None = None
        if self._templates is not None:
            plan = {
                **bwrap.mount_plan(workdir=home / "work", sockets=binds),
                **launcher_plan(inner[3:]),
                "uid": uid,
                "cgroups": list(procs),
                "seccomp": bwrap.seccomp.hex(),
            }
        sealed = seal(
            bwrap, inner, workdir=home / "work", sockets=binds, uid=uid, environment=environment
        )
        return Spawn(
            plan=plan,
            command=in_cgroups(procs, fresh_session_keyring(sealed.argv)),
            cwd=home,
            listener=listener,
            pass_fds=(listener.fileno(), *sealed.fds),
            owned_fds=sealed.fds,
            bridge_path=handle.path("bridge.sock"),
            home=Path(HOME),
            python=python,
            python_path=bwrap.python_path,
            variables=variables,
            environment=environment,
            host_environment=host_environment(self.placement.run_id),
        )

    def _unsandboxed(self, launch: AgentLaunch, home: Path, procs: Sequence[str]) -> Spawn:
        """The launcher as a plain child process; the bridge on a loopback port."""
        listener = socket.create_server(("127.0.0.1", 0))
        inner = launcher_command(
            self.placement.run_id, launch.name, launch.descriptor, watch_fd=self._watch_fd
        )
        port = listener.getsockname()[1]
        python_path = agent_python_path()
        workdir = home / "work"
        environment = self._environment(
            launch, workdir, listener.fileno(), port, sys.executable, python_path, {}
        )
        return Spawn(
            environment=environment,
            command=in_cgroups(procs, inner),
            cwd=home / "work",
            listener=listener,
            pass_fds=(self._watch_fd, listener.fileno()),
            bridge_host="127.0.0.1",
            bridge_port=port,
            home=workdir,
            python=sys.executable,
            python_path=python_path,
        )

    def _environment(
        self,
        launch: AgentLaunch,
        home: Path,
        bridge_fd: int,
        bridge_port: int,
        python: str,
        python_path: Sequence[str],
        sockets: Mapping[str, str],
    ) -> dict[str, str]:
        """What the agent's program runs with: its descriptor's variables, the boot contract's
        and the run's sockets."""
        placement = self.placement
        return scrubbed_environment(
            launch.descriptor,
            agent=launch.name,
            workdir=home,
            router_url=placement.router_url,
            bridge_port=bridge_port,
            bridge_fd=bridge_fd,
            seed=placement.seed,
            router_ca_file=placement.router_ca_file,
            run_id=placement.run_id,
            python_path=python_path,
            python=python,
            sockets=sockets,
        )

    def _gateway(self, url: str) -> Path:
        """The run's model-gateway socket, relayed to the gateway's loopback port."""
        if self._sockets.gateway is None:
            parts = urlsplit(url)
            if parts.hostname not in LOOPBACK_HOSTS:
                # the run's gateway listens on this machine's loopback; a relay elsewhere would
                # hand a sandbox without a network any service the controller reaches
                raise SandboxStartError(
                    f"the model gateway's address {url!r} is not this machine's loopback",
                    reason="gateway-not-local",
                )
            sock = bind_unix(self._sockets.directory, "model-gateway.sock", mode=0o666)
            self._tasks.start_soon(
                relay_to_tcp, sock, parts.hostname or "127.0.0.1", parts.port or 80
            )
            self._sockets.gateway = self._sockets.directory / "model-gateway.sock"
        return self._sockets.gateway

    async def stop(self, sandbox: Sandbox, *, grace_s: float) -> ProcessExit:
        assert isinstance(sandbox, LocalSandbox)
        exited = sandbox.access.exit
        with anyio.move_on_after(grace_s):
            return await exited
        sandbox.signal(signal.SIGTERM)
        with anyio.move_on_after(sandbox.term_grace_s):
            return await exited
        sandbox.signal(signal.SIGKILL)
        return await exited

    async def harvest(self, sandbox: Sandbox, declared: Harvest) -> list[HarvestedItem]:
        assert isinstance(sandbox, LocalSandbox)
        target = self.placement.run_dir / "artifacts" / sandbox.name
        return await anyio.to_thread.run_sync(
            copy_declared, sandbox.workdir, sandbox.log, declared, target, self.placement.run_dir
        )

    async def teardown(self) -> None:
        """Kill whatever still runs (every member of each agent's cgroup), wait for it, delete
        the cgroups and the sandboxes (they hold secrets)."""
        for sandbox in self._sandboxes:
            sandbox.signal(signal.SIGKILL)
        with anyio.move_on_after(10):
            for sandbox in self._sandboxes:
                await sandbox.access.exit
        if self._isolation.cgroups is not None:
            await anyio.to_thread.run_sync(self._isolation.cgroups.destroy, self._group)
        for handle in self._sockets.handles:
            handle.close()
        self._uids.release()
        if self._templates is not None:
            await self._templates.aclose()
        run_dir = self.placement.run_dir
        for directory in (run_dir / SANDBOXES_DIR, self._sockets.directory):
            await anyio.to_thread.run_sync(remove_tree, directory)  # agents' trees: hostile
        pids = run_dir / PIDS_DIR
        for sandbox in self._sandboxes:
            if sandbox.access.exit.done:
                (pids / agent_record(sandbox.name)).unlink(missing_ok=True)
