"""How the local profile starts one agent: the same entrypoint as its container, as a child process.

A small launcher runs first inside the child: it asks the kernel to kill it when the controller
dies (``PR_SET_PDEATHSIG``), watches a pipe whose only writer is the controller (EOF: the
controller is gone, exit), applies the resource limits, then runs the entrypoint. Python
entrypoints run in the launcher's interpreter (no second start-up); anything else is exec'd.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from agent_images import boot
from controller.agents.runtime import Resources, RuntimeDescriptor

MIB = 1024 * 1024

LAUNCHER = """\
import ctypes, json, os, resource, runpy, signal, sys, threading
run_id, agent, parent, watch_fd, limits = sys.argv[1:6]
command = sys.argv[7:]
if sys.platform == "linux":
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
if os.getppid() != int(parent):
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


def rlimits(resources: Resources) -> dict[str, int]:
    return {
        "RLIMIT_AS": resources.memory_limit_mib * MIB,
        "RLIMIT_NOFILE": resources.open_files,
        "RLIMIT_CORE": 0,
    }


def launcher_command(
    run_id: str, agent: str, watch_fd: int, descriptor: RuntimeDescriptor
) -> list[str]:
    """The child's argv; it names the run, which the reaper checks before killing."""
    return [
        sys.executable,
        "-c",
        LAUNCHER,
        run_id,
        agent,
        str(os.getpid()),
        str(watch_fd),
        json.dumps(rlimits(descriptor.resources), sort_keys=True),
        "--",
        *descriptor.command,
    ]


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
) -> dict[str, str]:
    """Only what the descriptor grants, the boot variables, and a minimal PATH/HOME/LANG."""
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    env: dict[str, str] = {"PATH": path, "HOME": str(workdir), "LANG": "C.UTF-8"}
    env.update(descriptor.environment)
    boot_variables: Mapping[str, str] = {
        boot.AGENT_NAME: agent,
        boot.ROUTER_URL: router_url,
        boot.BRIDGE_PORT: str(bridge_port),
        boot.BRIDGE_FD: str(bridge_fd),
        boot.SECRETS_FILE: boot.DEFAULT_SECRETS_FILE,
        boot.RUN_SEED: str(seed),
    }
    env.update(boot_variables)
    if router_ca_file:
        env[boot.ROUTER_CA_FILE] = router_ca_file
    return env


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 (its directory 0700); never overwrite."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_files(workdir: Path, files: Mapping[str, bytes]) -> None:
    for relative, content in files.items():
        target = workdir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
