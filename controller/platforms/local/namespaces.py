"""A forked agent enters the local sandbox in-process: the namespaces, mount view and privileges
that ``bwrap`` and ``setpriv`` give an agent (``sandbox.Bubblewrap.command``), for the template.

Three processes, as with bubblewrap: the outer one (``enter`` forks it from the template) joins
the agent's cgroups and a fresh session keyring, then unshares mount, PID, network, IPC, UTS and
cgroup namespaces; pid 1 inside brings loopback up, names the host ``agent``, builds the mount
view on a tmpfs and pivots into it, then reaps until the agent exits; pid 2, the agent, empties
its capability bounding set, becomes its own uid and gid with no groups, sets ``no_new_privs``
and loads the compiled seccomp filter. Any step that fails ends the process before agent code
runs (exit ``FAILED``), so such a fork never passes the readiness gate.

Root only (the template runs as the controller's root). Standard library only: the template
loads this file by path, without the ``controller`` package.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

FAILED = 70
"""The exit status of a fork whose sandbox could not be entered."""
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_SLAVE = 4096, 16384, 1 << 19
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
AT_FDCWD, AT_RECURSIVE, MNT_DETACH = -100, 0x8000, 2
PR_SET_PDEATHSIG, PR_SET_NAME, PR_SET_SECCOMP, PR_CAPBSET_DROP = 1, 15, 22, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
PR_SET_DUMPABLE, PR_SET_MM, PR_SET_MM_MAP = 4, 35, 14
_MM_FIELDS = (
    "start_code end_code start_data end_data start_brk brk start_stack "
    "arg_start arg_end env_start env_end"
).split()
_STAT_FIELDS = {
    "start_code": 26,
    "end_code": 27,
    "start_stack": 28,
    "start_data": 45,
    "end_data": 46,
    "start_brk": 47,
    "arg_start": 48,
    "arg_end": 49,
    "env_start": 50,
    "env_end": 51,
}
"""Where ``proc(5)`` puts each in ``/proc/<pid>/stat`` (1-based)."""
SECCOMP_MODE_FILTER = 2
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
SYSCALLS = {"x86_64": {"keyctl": 250, "pivot_root": 155, "capset": 126, "mount_setattr": 442}}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_LINKS = (
    ("/proc/self/fd", "fd"),
    ("/proc/self/fd/0", "stdin"),
    ("/proc/self/fd/1", "stdout"),
    ("/proc/self/fd/2", "stderr"),
    ("/proc/kcore", "core"),
    ("pts/ptmx", "ptmx"),
)
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")
"""What bwrap binds read-only over itself in ``/proc`` (each that it may write to)."""
NEW_ROOT = "/run/society-runner/new-root"
"""Where pid 1 mounts the sandbox's root tmpfs (in its own mount namespace) before pivoting."""
SANDBOX_NAME = b"society-sandbox"
"""The outer process's and pid 1's name (``comm``): signals other than SIGKILL spare them."""

_libc = ctypes.CDLL(None, use_errno=True)


class Refused(OSError):
    """A step of entering the sandbox failed; the fork exits ``FAILED``."""


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise Refused(number, f"{what}: {os.strerror(number)}")
    return result


def _syscall(name: str, *args: Any) -> int:
    number = SYSCALLS.get(os.uname().machine, {}).get(name)
    if number is None:
        raise Refused(0, f"{name}: its number on {os.uname().machine} is not known")
    return _check(_libc.syscall(number, *args), name)


def _prctl(option: int, arg: Any = 0, third: Any = 0, what: str = "prctl") -> None:
    _check(_libc.prctl(option, arg, third, 0, 0), what)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    encoded = [None if v is None else v.encode() for v in (source, target, fstype)]
    result = _libc.mount(*encoded, flags, data.encode() if data else None)
    _check(result, f"mount {source} on {target}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns")]


def _set_attributes(target: str, attributes: int) -> None:
    """Every mount at and below ``target`` gets ``attributes`` (bwrap remounts each submount)."""
    attr = _MountAttr(attributes, 0, 0, 0)
    _syscall("mount_setattr", AT_FDCWD, target.encode(), AT_RECURSIVE, ctypes.byref(attr), 32)


def _bind(source: str, target: str, *, read_only: bool, devices: bool = False) -> None:
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    _mount(source, target, None, MS_BIND | MS_REC)
    attributes = MOUNT_ATTR_NOSUID | (0 if devices else MOUNT_ATTR_NODEV)
    _set_attributes(target, attributes | (MOUNT_ATTR_RDONLY if read_only else 0))


def build_root(plan: dict[str, Any], root: str = NEW_ROOT) -> None:
    """The mount view of ``plan`` (bwrap's order: /proc, /dev, /tmp, parents, binds) at ``root``."""
    os.makedirs(root, mode=0o755, exist_ok=True)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV)
    os.chmod(root, 0o755)
    proc = root + "/proc"
    os.mkdir(proc, 0o755)
    _mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_COVERED:
        path = f"{proc}/{name}"
        if os.path.exists(path) and os.access(path, os.W_OK):
            _bind(path, path, read_only=True)
    _build_dev(root + "/dev")
    os.mkdir(root + "/tmp")
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV)
    os.chmod(root + "/tmp", 0o1777)
    for directory in plan["dirs"]:
        os.makedirs(root + directory, mode=0o755, exist_ok=True)
        os.chmod(root + directory, 0o755)
    for option, source, destination in plan["binds"]:
        if option == "--symlink":
            os.symlink(source, root + destination)
        else:
            _bind(source, root + destination, read_only=option == "--ro-bind")


def _build_dev(dev: str) -> None:
    os.mkdir(dev, 0o755)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for name in DEVICES:
        _bind(f"/dev/{name}", f"{dev}/{name}", read_only=False, devices=True)
    for target, name in DEVICE_LINKS:
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/shm", 0o755)
    os.mkdir(f"{dev}/pts", 0o755)
    options = "newinstance,ptmxmode=0666,mode=620"
    _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, options)


def pivot(root: str, home: str) -> None:
    """Make ``root`` the root of this mount namespace and forget the host's."""
    old = root + "/.old-root"
    os.mkdir(old, 0o700)
    _syscall("pivot_root", root.encode(), old.encode())
    os.chdir("/")
    _check(_libc.umount2(b"/.old-root", MNT_DETACH), "umount the host's root")
    os.rmdir("/.old-root")
    os.chdir(home)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING)
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, request)


_SHOWN: list[mmap.mmap] = []
"""The memory that ``/proc/<pid>/cmdline`` and ``environ`` read from (it lives as long as we do)."""


class _MmMap(ctypes.Structure):
    """``struct prctl_mm_map``: the whole layout, set at once (``PR_SET_MM_MAP``)."""

    _fields_ = [
        *((name, ctypes.c_uint64) for name in _MM_FIELDS),
        ("auxv", ctypes.c_void_p),
        ("auxv_size", ctypes.c_uint32),
        ("exe_fd", ctypes.c_uint32),
    ]


def show_as(argv: Sequence[str], environment: dict[str, str]) -> None:
    """Make ``/proc/<pid>/cmdline`` and ``environ`` read ``argv`` and ``environment``, as they
    would for a process started with them (a fork's own are the template's)."""
    cmdline = b"".join(a.encode() + b"\0" for a in argv)
    variables = b"".join(f"{k}={v}".encode() + b"\0" for k, v in environment.items())
    # private and anonymous: the kernel reads these ranges only from such memory
    private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    block = mmap.mmap(-1, len(cmdline) + len(variables) + 1, flags=private)
    block.write(cmdline + variables)
    _SHOWN.append(block)
    start = ctypes.addressof(ctypes.c_char.from_buffer(block))
    layout = _current_layout()
    layout.update(
        arg_start=start,
        arg_end=start + len(cmdline),
        env_start=start + len(cmdline),
        env_end=start + len(cmdline) + len(variables),
    )
    new = _MmMap(**layout, auxv=None, auxv_size=0, exe_fd=0xFFFFFFFF)  # auxv, exe: kept
    result = _libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(new), ctypes.sizeof(new), 0)
    _check(result, "show its own argv and environment")


def _current_layout() -> dict[str, int]:
    """This process's memory layout, from ``/proc/self/stat`` (and ``brk``: where it is now)."""
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    at = {name: int(fields[number - 3]) for name, number in _STAT_FIELDS.items()}
    sbrk = _libc.sbrk
    sbrk.restype = ctypes.c_void_p
    at["brk"] = sbrk(0) or at["start_brk"]
    return {name: at[name] for name in _MM_FIELDS}


def drop_privileges(uid: int, seccomp: bytes) -> None:
    """Empty bounding set, ``uid``/``uid`` with no groups, no capabilities, ``no_new_privs``,
    then the seccomp filter (its BPF as ``bwrap --seccomp`` reads it)."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for capability in range(last + 1):
        _prctl(PR_CAPBSET_DROP, capability, what="drop the bounding set")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    _syscall("capset", header, bytes(24))
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, what="clear ambient capabilities")
    # a changed uid leaves a process undumpable (its /proc files root's); an exec'd program,
    # as under bwrap and setpriv, is dumpable again
    _prctl(PR_SET_DUMPABLE, 1, what="dumpable as after an exec")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, what="no_new_privs")
    program = ctypes.create_string_buffer(seccomp, len(seccomp))
    fprog = _SockFprog(len(seccomp) // 8, ctypes.addressof(program))
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), "load the seccomp filter")


def _die_with_parent(parent: int) -> None:
    """``parent``: what ``getppid`` answers while it lives (0: a parent outside our PID
    namespace)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, what="arm the death signal")
    if os.getppid() != parent:
        os._exit(FAILED)  # the parent died before the signal was armed


def _exit_status(status: int) -> int:
    """bwrap's convention: the command's exit code, or 128 + the signal that ended it."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _wait_for(child: int) -> NoReturn:
    """Reap every process (pid 1 inherits orphans) until ``child`` exits; exit as it did."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(FAILED)
        except InterruptedError:
            continue
        if pid == child:
            os._exit(_exit_status(status))


def _failing(step: Callable[[], None]) -> None:
    try:
        step()
    except BaseException as exc:  # nothing of the agent's may run outside its sandbox
        os.write(2, f"society: the forked agent cannot enter its sandbox: {exc}\n".encode())
        os._exit(FAILED)


def enter(plan: dict[str, Any], fds: Sequence[int]) -> None:
    """In a process just forked from the template: become the outer process of a new sandbox.

    ``fds`` become descriptors 0, 1, 2 and ``plan["bridge_fd"]``; every other one is closed.
    Returns only in the agent (pid 2 of the sandbox); the outer process and pid 1 exit as the
    agent did.
    """
    _failing(lambda: _outer(plan, fds))
    init = os.fork()
    if init:
        _wait_for(init)
    _failing(lambda: _init(plan))
    agent = os.fork()
    if agent:
        _wait_for(agent)
    _failing(lambda: _agent(plan))


def _outer(plan: dict[str, Any], fds: Sequence[int]) -> None:
    _die_with_parent(plan["template_pid"])
    _prctl(PR_SET_NAME, SANDBOX_NAME, what="name the sandbox")
    show_as(_launcher_argv(plan), plan["environment"])  # pid 1 and the agent inherit it
    _place_descriptors(fds, plan["bridge_fd"])
    os.setsid()
    for procs in plan["cgroups"]:
        with open(procs, "w") as group:
            group.write("0")
    _syscall("keyctl", 1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a new, empty session keyring
    _check(_libc.unshare(NAMESPACES | CLONE_NEWNET), "unshare namespaces")


def _place_descriptors(fds: Sequence[int], bridge_fd: int) -> None:
    stdin, log, bridge = fds
    for source, target in ((stdin, 0), (log, 1), (log, 2), (bridge, bridge_fd)):
        if source != target:
            os.dup2(source, target)
    os.closerange(3, bridge_fd)
    os.closerange(bridge_fd + 1, os.sysconf("SC_OPEN_MAX"))


def _init(plan: dict[str, Any]) -> None:
    _die_with_parent(0)
    os.setsid()  # bwrap --new-session: the sandbox's session, led by its pid 1
    socket.sethostname("agent")
    loopback_up()
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    build_root(plan)
    pivot(NEW_ROOT, plan["home"])


def _launcher_argv(plan: dict[str, Any]) -> list[str]:
    """The argv the launcher would have been started with (``python -c LAUNCHER ...``)."""
    return [sys.executable, *plan["argv"][:1], plan["launcher"], *plan["argv"][1:]]


def _agent(plan: dict[str, Any]) -> None:
    _prctl(PR_SET_NAME, plan["comm"].encode(), what="name the agent")
    environment = {**plan["environment"], "PWD": plan["home"]}  # bwrap --chdir sets PWD
    show_as(_launcher_argv(plan), environment)
    drop_privileges(plan["uid"], bytes.fromhex(plan["seccomp"]))
    _die_with_parent(1)
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = list(plan["argv"])
