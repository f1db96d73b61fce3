"""The local template: one pre-imported interpreter per runtime that forks each sandboxed agent.

The template starts once per run and runtime shape, imports what the agent program imports, and
waits on a ``SOCK_SEQPACKET`` socket whose other end only the controller holds. Each request
carries the agent's sandbox plan (``Bubblewrap.mount_plan``, uid, cgroups, seccomp filter,
environment, launcher argv) and three descriptors (stdin, log, bridge listener); the template
forks, and the fork enters its sandbox (``namespaces.enter``) before it runs the launcher. The
template answers each request with the fork's pid, and reports each fork's exit status.

The template dies with the controller (``PR_SET_PDEATHSIG``), and each fork with the template.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import TaskGroup

import controller.settings as settings
from controller.agents.runtime import RuntimeDescriptor
from controller.agents.termination import Observation
from controller.platforms.local import namespaces
from controller.platforms.local.isolation import TEMPLATE_ENV
from controller.platforms.local.launch import LAUNCHER, RUN_MARK
from controller.run.platform import SandboxStartError

_FD = settings.TEMPLATE_FD.name
_PRELOAD = settings.TEMPLATE_PRELOAD.name
_NAMESPACES = settings.TEMPLATE_NAMESPACES.name
_PARENT = settings.TEMPLATE_PARENT.name
MESSAGE_MAX = 1 << 20

_PROGRAM = """\
import ctypes, gc, importlib, importlib.util, json, os, selectors, signal, socket, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
control = socket.socket(fileno=int(os.environ.pop(FD)))
if os.getppid() != int(os.environ.pop(PARENT)):
    os._exit(70)  # the controller died before the death signal was armed
path = os.environ.pop(NAMESPACES)
spec = importlib.util.spec_from_file_location("namespaces", path)
namespaces = importlib.util.module_from_spec(spec)
spec.loader.exec_module(namespaces)
for name in json.loads(os.environ.pop(PRELOAD)):
    importlib.import_module(name)
comm = open("/proc/self/comm").read().strip()
gc.freeze()  # what the template imported stays out of the forks' collections: pages stay shared
wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
signal.set_wakeup_fd(wake_write)
signal.signal(signal.SIGCHLD, lambda *_: None)
control.sendall(b'{"ready": true}')
events = selectors.DefaultSelector()
events.register(control, selectors.EVENT_READ)
events.register(wake_read, selectors.EVENT_READ)
def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        exited = {"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}
        control.sendall(json.dumps(exited).encode())
def fork(message, fds):
    plan = json.loads(message)
    plan["template_pid"], plan["comm"] = os.getpid(), comm
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        events.close()
        control.detach()  # closed below with the rest: its number may become the agent's bridge
        namespaces.enter(plan, fds)
        sys.argv = plan["argv"]
        return plan
    for fd in fds:
        os.close(fd)
    control.sendall(json.dumps({"pid": pid}).encode())
def serve():
    while True:
        for key, _ in events.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
                if not message:
                    os._exit(0)  # the controller is gone; each fork dies with the template
                plan = fork(message, fds)
                if plan is not None:
                    return plan
            else:
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
plan = serve()
del serve, fork, reap, events, control
exec(compile(plan["launcher"], "<string>", "exec"), {"__name__": "__main__"})
"""
PROGRAM = (
    f"FD, PARENT, NAMESPACES, PRELOAD = {(_FD, _PARENT, _NAMESPACES, _PRELOAD)!r}\n" + _PROGRAM
)
"""The template's program: its handoff variables' names (``settings``), then ``_PROGRAM``."""
"""The template program (``python -c``): its argv and environment name no host path of the run."""


def preloads(command: Sequence[str]) -> tuple[str, ...]:
    """What a ``python -m module`` entrypoint imports at its top level (nothing for others)."""
    if len(command) < 3 or command[0] not in ("python", "python3") or command[1] != "-m":
        return ()
    module = command[2]
    found = importlib.util.find_spec(module)
    if found is None:
        return ()
    if found.submodule_search_locations is None:
        return (module,) if module != "__main__" else ()
    main = importlib.util.find_spec(f"{module}.__main__")
    if main is None or main.origin is None:
        return (module,)
    tree = ast.parse(Path(main.origin).read_text())
    names: list[str] = [module]
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return tuple(dict.fromkeys(names))


@dataclass
class ForkedAgent:
    """A fork of the template as the controller sees it: its outer process (not our child)."""

    pid: int
    exited: Observation[int] = field(default_factory=Observation)

    @property
    def returncode(self) -> int | None:
        return self.exited.peek()

    async def wait(self) -> int:
        return await self.exited

    async def aclose(self) -> None:
        return None


class Template:
    """One running template: ``fork`` starts an agent from it."""

    def __init__(self, control: socket.socket, process: subprocess.Popen[bytes]) -> None:
        self._control = control
        self._process = process
        self._forks: dict[int, ForkedAgent] = {}
        """The live forks (a pid leaves when its fork exits: the kernel may reuse it)."""
        self._started: list[Observation[ForkedAgent | bool]] = []
        """One per request sent, answered in order: the fork, or False (the template is gone)."""
        self._lock = anyio.Lock()

    @property
    def pid(self) -> int:
        return self._process.pid

    async def fork(self, plan: Mapping[str, Any], fds: Sequence[int]) -> ForkedAgent:
        """Ask for one fork; raises ``SandboxStartError`` if the template is gone."""
        message = json.dumps(plan).encode()
        async with self._lock:
            started: Observation[ForkedAgent | bool] = Observation()
            try:
                while True:
                    try:
                        socket.send_fds(self._control, [message], list(fds))
                        break
                    except BlockingIOError:
                        await anyio.wait_writable(self._control)
            except OSError as exc:
                raise SandboxStartError(
                    f"the local template is gone ({exc}); see the agents' output.log",
                    reason="spawn-failed",
                ) from exc
            self._started.append(started)
            fork = await started
        if not isinstance(fork, ForkedAgent):
            raise SandboxStartError(
                "the local template exited before it forked the agent", reason="spawn-failed"
            )
        return fork

    async def serve(self) -> None:
        """Read the template's answers until it exits; then every live fork is reported dead."""
        try:
            while True:
                await anyio.wait_readable(self._control)
                try:
                    message = self._control.recv(MESSAGE_MAX)
                except BlockingIOError:
                    continue
                if not message:
                    return
                self._answer(json.loads(message))
        finally:
            for started in self._started:
                started.set(False)
            for fork in self._forks.values():
                if not fork.exited.done:
                    fork.exited.set(-9)  # its death signal fired with the template

    def _answer(self, answer: dict[str, Any]) -> None:
        if "returncode" in answer:
            fork = self._forks.pop(answer["pid"], None)
            if fork is not None:
                fork.exited.set(answer["returncode"])
        elif "pid" in answer:
            fork = self._forks[answer["pid"]] = ForkedAgent(answer["pid"])
            self._started.pop(0).set(fork)

    def close(self) -> None:
        self._control.close()
        self._process.kill()
        self._process.wait()


@asynccontextmanager
async def running_template(
    python: str,
    python_path: Sequence[str],
    preload: Sequence[str],
    *,
    run_id: str,
    tasks: TaskGroup,
    ready_timeout_s: float = 120.0,
) -> AsyncIterator[Template]:
    """Start a template that imports ``preload``; it is killed when the scope ends."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {
        "PATH": os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(python_path),
        RUN_MARK: run_id,
        _FD: str(theirs.fileno()),
        _PRELOAD: json.dumps(list(preload)),
        _NAMESPACES: namespaces.__file__,
        _PARENT: str(os.getpid()),
    }
    try:
        process = subprocess.Popen(  # noqa: ASYNC220 (a fork and exec; nothing to wait for)
            [python, "-c", PROGRAM],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
    finally:
        theirs.close()
    ours.setblocking(False)
    template = Template(ours, process)
    try:
        with anyio.fail_after(ready_timeout_s):
            await anyio.wait_readable(ours)
        if json.loads(ours.recv(MESSAGE_MAX) or b"{}").get("ready") is not True:
            raise SandboxStartError(
                f"the local template ({' '.join(preload) or 'no preload'}) exited before it "
                f"was ready (exit {process.wait()}); run the agent's program by hand to see why",
                reason="spawn-failed",
            )
        tasks.start_soon(template.serve)
        yield template
    finally:
        template.close()


class LocalTemplates:
    """A run's templates, one per (interpreter, preload), each started when first needed."""

    def __init__(self, run_id: str, tasks: TaskGroup) -> None:
        self._run_id = run_id
        self._tasks = tasks
        self._stack = AsyncExitStack()
        self._running: dict[tuple[str, tuple[str, ...]], Template] = {}
        self._lock = anyio.Lock()

    async def fork(
        self,
        descriptor: RuntimeDescriptor,
        plan: Mapping[str, Any],
        log: IO[bytes],
        listener: socket.socket,
        *,
        python: str,
        python_path: Sequence[str],
    ) -> ForkedAgent:
        """The agent, forked from its runtime's template; its stdin is ``/dev/null``."""
        template = await self._template(python, python_path, preloads(descriptor.command))
        stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return await template.fork(plan, (stdin, log.fileno(), listener.fileno()))
        finally:
            os.close(stdin)

    async def _template(
        self, python: str, python_path: Sequence[str], preload: tuple[str, ...]
    ) -> Template:
        async with self._lock:
            key = (python, preload)
            if key not in self._running:
                self._running[key] = await self._stack.enter_async_context(
                    running_template(
                        python, python_path, preload, run_id=self._run_id, tasks=self._tasks
                    )
                )
            return self._running[key]

    async def aclose(self) -> None:
        await self._stack.aclose()


def template_requested() -> bool:
    return settings.current().flag(settings.LOCAL_TEMPLATE)


def launcher_plan(launcher_argv: Sequence[str]) -> dict[str, Any]:
    """What the fork runs once sandboxed: the launcher, with ``launcher_argv`` as its ``sys.argv``
    (the argv ``launch.launcher_command`` gives ``python -c``, from its ``-c``)."""
    return {"launcher": LAUNCHER, "argv": ["-c", *launcher_argv]}


__all__ = [
    "PROGRAM",
    "TEMPLATE_ENV",
    "ForkedAgent",
    "LocalTemplates",
    "Template",
    "launcher_plan",
    "preloads",
    "running_template",
    "template_requested",
]
