"""How the local profile starts one agent: the same entrypoint as its container, as a child process.

A shell line first moves the child into the agent's cgroups (``local_cgroup``), then execs the
sandbox (``local_sandbox``) or, unsandboxed, the launcher. The small launcher asks the kernel to
kill it when its parent dies (``PR_SET_PDEATHSIG``); unsandboxed it also watches a pipe whose only
writer is the controller (EOF: the controller is gone, exit). It applies the resource limits, then
runs the entrypoint. Python entrypoints run in the launcher's interpreter (no second start-up);
anything else is exec'd.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import controller.settings as settings
from controller.agents.runtime import Resources, RuntimeDescriptor
from controller.run.platform import AgentLaunch, SandboxStartError
from society_sandbox import boot

MIB = 1024 * 1024
RUN_MARK = settings.RUN_ID.name

LAUNCHER = """\
import ctypes, json, os, resource, runpy, signal, sys, threading
run_id, agent, parent, watch_fd, limits = sys.argv[1:6]
command = sys.argv[7:]
if sys.platform == "linux":
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
if int(parent) and os.getppid() != int(parent):
    os._exit(70)  # the controller died before the launcher armed the death signal
for name, value in json.loads(limits).items():
    resource.setrlimit(getattr(resource, name), (value, value))
def _watch(fd=int(watch_fd)):
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)  # the controller is gone
if int(watch_fd) >= 0:
    threading.Thread(target=_watch, name="society-watchdog", daemon=True).start()
python = command[0] in ("python", "python3")
if python and len(command) > 2 and command[1] == "-m":
    sys.argv = [command[2], *command[3:]]
    runpy.run_module(command[2], run_name="__main__", alter_sys=True)
elif python and len(command) > 2 and command[1] == "-c":
    sys.argv = ["-c", *command[3:]]
    exec(compile(command[2], "<string>", "exec"), {"__name__": "__main__"})
elif python and len(command) > 1:
    sys.argv = command[1:]
    runpy.run_path(command[1], run_name="__main__")
else:
    os.execvp(command[0], command)
"""


@dataclass(frozen=True)
class Spawn:
    """How one agent's process is started, and where its bridge is."""

    command: list[str]
    cwd: Path
    listener: socket.socket
    pass_fds: tuple[int, ...]
    home: Path
    """Its working directory as the agent sees it."""
    python: str
    python_path: tuple[str, ...]
    bridge_host: str = ""
    bridge_port: int = 0
    bridge_path: str | None = None
    variables: dict[str, str] = field(default_factory=dict)
    owned_fds: tuple[int, ...] = ()
    """Descriptors only the child needs: closed here once it started."""
    plan: dict[str, object] | None = None
    """Sandboxed, with a template: what its fork needs to enter the same sandbox."""
    environment: dict[str, str] = field(default_factory=dict)
    """What the agent's program runs with."""
    host_environment: dict[str, str] | None = None
    """What the host-side processes that start a sandbox run with (a fixed, controller-built
    environment; the agent's reaches only the sandbox); ``None``: ``environment`` (unsandboxed,
    the process is the agent)."""


def rlimits(resources: Resources) -> dict[str, int]:
    return {
        "RLIMIT_AS": resources.memory_limit_mib * MIB,
        "RLIMIT_NOFILE": resources.open_files,
        "RLIMIT_CORE": 0,
    }


FRESH_KEYRING = """\
import ctypes, errno, os, sys
machine = os.uname().machine
number = {"x86_64": 250, "aarch64": 219, "riscv64": 219}.get(machine)  # SYS_keyctl
if number is None:
    sys.exit(f"society: no fresh session keyring: keyctl's number on {machine} is not known")
if ctypes.CDLL(None, use_errno=True).syscall(number, 1, None) < 0:
    if ctypes.get_errno() != errno.ENOSYS:  # ENOSYS: a kernel without keyrings, none to inherit
        sys.exit("society: no fresh session keyring: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"""
"""Joins a new, empty, anonymous session keyring (``KEYCTL_JOIN_SESSION_KEYRING``), then execs
its arguments: bubblewrap does not replace the controller's, which would be the agent's."""


def fresh_session_keyring(command: Sequence[str], *, python: str = sys.executable) -> list[str]:
    """``command`` in a session keyring of its own (it starts empty; nothing else holds it)."""
    return [python, "-I", "-S", "-c", FRESH_KEYRING, *command]


JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 71; shift; done; shift; exec "$@"'
"""Moves the shell into each named ``cgroup.procs``, then execs the rest of its arguments."""


def launcher_command(
    run_id: str,
    agent: str,
    descriptor: RuntimeDescriptor,
    *,
    watch_fd: int | None,
    python: str = sys.executable,
) -> list[str]:
    """The launcher's argv. ``watch_fd=None``: inside a sandbox (bwrap watches the controller)."""
    return [
        python,
        "-c",
        LAUNCHER,
        run_id,
        agent,
        str(os.getpid() if watch_fd is not None else 0),
        str(watch_fd if watch_fd is not None else -1),
        json.dumps(rlimits(descriptor.resources), sort_keys=True),
        "--",
        *descriptor.command,
    ]


def in_cgroups(procs_files: Sequence[str], command: Sequence[str]) -> list[str]:
    """``command``, started only once its process joined every group (nothing escapes them)."""
    if not procs_files:
        return list(command)
    return ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *procs_files, "--", *command]


def scrubbed_environment(
    descriptor: RuntimeDescriptor,
    *,
    agent: str,
    workdir: Path,
    router_url: str,
    bridge_port: int,
    bridge_fd: int,
    seed: int,
    router_ca_file: str | None,
    run_id: str,
    python_path: Sequence[str] = (),
    python: str = sys.executable,
    sockets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Only what the descriptor grants, the boot variables, and a minimal PATH/HOME/LANG.

    ``SOCIETY_RUN_ID`` marks every process of the run: the reaper kills no process without it.
    ``sockets`` adds variables naming the Unix sockets a sandbox reaches its services through.
    """
    path = os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    env: dict[str, str] = {"PATH": path, "HOME": str(workdir), "LANG": "C.UTF-8"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    env.update(descriptor.environment)
    boot_variables: Mapping[str, str] = {
        boot.AGENT_NAME: agent,
        boot.ROUTER_URL: router_url,
        boot.BRIDGE_PORT: str(bridge_port),
        boot.BRIDGE_FD: str(bridge_fd),
        boot.SECRETS_FILE: boot.DEFAULT_SECRETS_FILE,
        boot.RUN_SEED: str(seed),
        RUN_MARK: run_id,
    }
    env.update(boot_variables)
    env.update(sockets or {})
    if router_ca_file:
        env[boot.ROUTER_CA_FILE] = router_ca_file
    return env


def host_environment(run_id: str) -> dict[str, str]:
    """The environment of the processes outside a sandbox that start it (the cgroup joiner, the
    keyring launcher, bwrap): fixed by the controller, nothing a descriptor chose; the run's mark
    lets the reaper find them."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", RUN_MARK: run_id}


def write_private(path: Path, data: bytes, *, owner: int | None = None) -> None:
    """Create ``path`` with mode 0600 (its directory 0700); never overwrite. ``owner``: chown
    both to that uid and gid (the sandbox's)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        if owner is not None:
            os.fchown(fd, owner, owner)
            os.chown(path.parent, owner, owner)
    finally:
        os.close(fd)


def write_files(workdir: Path, files: Mapping[str, bytes]) -> None:
    for relative, content in files.items():
        target = workdir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def prepare_workdir(
    workdir: Path,
    descriptor: RuntimeDescriptor,
    launch: AgentLaunch,
    credentials: dict[str, str],
    owner: int | None,
) -> None:
    workdir.mkdir(parents=True, exist_ok=False)
    os.chmod(workdir.parent, 0o700)
    write_files(workdir, descriptor.files)
    write_private(
        workdir / ".society" / "secrets.json", launch.secrets(credentials).to_json(), owner=owner
    )
    if owner is not None:  # the sandbox's uid owns its working directory, and nothing else
        for directory, _, names in os.walk(workdir):
            os.chown(directory, owner, owner)
            for name in names:
                os.chown(os.path.join(directory, name), owner, owner, follow_symlinks=False)


def resolve_credentials(launch: AgentLaunch) -> dict[str, str]:
    values: dict[str, str] = {}
    missing: list[str] = []
    for name, ref in launch.descriptor.credentials.items():
        value = settings.current().get(ref.env) if ref.env else None
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


@functools.cache
def agent_module_path(python: str, python_path: tuple[str, ...]) -> tuple[str, ...]:
    """Where an agent's interpreter finds modules and distributions: the agent packages, then
    what ``python`` finds by itself (no user site, nothing of this process's environment)."""
    probe = "import json, sys; print(json.dumps(sys.path))"
    found = subprocess.run(
        [python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return (*python_path, *json.loads(found.stdout))


def agent_python_path() -> tuple[str, ...]:
    """Where the agent packages are, so an agent runs the code installed beside the controller."""
    from controller.platforms.local.sandbox import AGENT_PACKAGES, package_dirs

    return tuple(dict.fromkeys(str(package.parent) for package in package_dirs(AGENT_PACKAGES)))
