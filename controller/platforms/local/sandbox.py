"""The local agent sandbox, built with bubblewrap (``bwrap``): one per agent.

What an agent sees and may do:

- files: a fresh root with the system (``/usr``), the Python runtime and the packages an agent
  program imports, all read-only; its working directory at ``/home/agent``, the only writable
  place besides a private, empty ``/tmp`` (a tmpfs of its own); the run's sockets under
  ``/run/society``. Not the run directory, other agents, the controller.
- processes: its own PID namespace (``/proc`` shows only the sandbox) in a new session; bwrap
  kills all of it when the controller dies (``--die-with-parent``), and the agent's cgroup
  (``local_cgroup``) holds every process it starts.
- identity: a uid/gid of its own (``AgentUids``: no two agents of any run share one), no
  capabilities (an empty bounding set), ``no_new_privs``, a fresh session keyring
  (``launch.fresh_session_keyring``) and a default-deny seccomp filter (``local_syscalls``); as
  root, bwrap sets up the namespaces and ``setpriv`` drops to that uid (a real unprivileged uid);
  as a user, a user namespace maps it to that user.
- what it is told: bwrap reads its options from a descriptor (``--args``), so ``/proc/1/cmdline``
  names no host path.
- network: its own network namespace with only loopback. The router and the model gateway are
  reached through Unix sockets bound into ``/run/society``; its bridge listens on a Unix socket
  that the controller hands it as a descriptor, the only descriptor it inherits.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import controller.settings as settings
from controller.platforms.local.syscalls import FilterUnavailable, compiled_filter
from controller.run.platform import PlatformError

FIRST_AGENT_UID = 1 << 24
UID_BLOCK = 4096
"""Uids one run may hand out: its roster never holds more agents than this."""
UID_BLOCKS = 1 << 18
UID_CLAIMS = Path("/run/society-runner/uid-blocks")
"""As root: one lock file per uid block, held by the live run that uses it."""
HOME = "/home/agent"
SOCKETS = "/run/society"
ROUTER_SOCKET = f"{SOCKETS}/router.sock"
MODEL_GATEWAY_SOCKET = f"{SOCKETS}/model-gateway.sock"
UNSANDBOXED_ENV = settings.UNSANDBOXED.name
"""Set to 1 (or pass ``society run --unsandboxed``) to run local agents without a sandbox."""

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/ssl", "/etc/ca-certificates")
AGENT_PACKAGES = ("society_sandbox", "agent_images")
"""What an agent program imports from this project: the wall package and the programs."""


class SandboxUnavailable(PlatformError):
    """The local sandbox cannot be built here; the message names the next step."""

    reason = "sandbox-unavailable"


def unsandboxed_requested() -> bool:
    return settings.current().flag(settings.UNSANDBOXED)


@dataclass(frozen=True, slots=True)
class Bubblewrap:
    """A working bwrap on this machine, and how it drops privileges."""

    executable: str
    version: str
    setpriv: str | None
    """As root: ``setpriv`` drops to the sandbox uid; as a user, a user namespace maps it."""
    code_paths: tuple[Path, ...] = field(default=())
    """Read-only binds: the Python runtime, its site-packages, the agent packages."""
    python_path: tuple[str, ...] = field(default=())
    seccomp: bytes = b""
    """The compiled seccomp filter (BPF) every sandbox gets."""

    @classmethod
    def probe(cls) -> Bubblewrap:
        """Find bwrap and check that it can build a sandbox here; raises ``SandboxUnavailable``."""
        return _probe()

    def command(
        self,
        inner: Sequence[str],
        *,
        workdir: Path,
        sockets: Iterable[tuple[Path, str]],
        uid: int,
        seccomp_fd: int,
        extra: Iterable[tuple[str, Path, str]] = (),
        environment: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The argv that runs ``inner`` as ``uid`` in a fresh sandbox: bwrap, its ``options``,
        ``--`` and what runs ``inside``."""
        options = self.options(
            workdir=workdir,
            sockets=sockets,
            uid=uid,
            seccomp_fd=seccomp_fd,
            extra=extra,
            environment=environment,
        )
        return [self.executable, *options, "--", *self.inside(inner, uid)]

    def options(
        self,
        *,
        workdir: Path,
        sockets: Iterable[tuple[Path, str]],
        uid: int,
        seccomp_fd: int,
        extra: Iterable[tuple[str, Path, str]] = (),
        environment: Mapping[str, str] | None = None,
    ) -> list[str]:
        """bwrap's options for a fresh sandbox around ``workdir``, its seccomp filter read from
        ``seccomp_fd``; ``extra`` binds more (``--ro-bind``, ``--bind`` or ``--tmpfs``, source,
        destination). ``environment``: what the sandbox's program runs with (bwrap clears its
        own); without it, bwrap's own passes through."""
        binds = self.binds(workdir=workdir, sockets=sockets, extra=extra)
        argv = [
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "agent",
        ]
        if self.setpriv is not None:
            argv += ["--cap-drop", "ALL"]
            # setpriv needs these to drop to the agent's uid and empty the bounding set
            for capability in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
                argv += ["--cap-add", capability]
        else:
            argv += ["--unshare-user", "--uid", str(uid), "--gid", str(uid)]
            argv += ["--cap-drop", "ALL"]
        argv += ["--seccomp", str(seccomp_fd)]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # A private, empty /tmp (a tmpfs that dies with the sandbox): programs such as OpenClaw
        # put lock files under a hard-coded /tmp.
        argv += ["--perms", "1777", "--tmpfs", "/tmp"]
        for directory in _parents_to_create(d for _, _, d in binds):
            argv += ["--perms", "0755", "--dir", directory]
        for option, source, destination in binds:
            argv += [option, destination] if option == "--tmpfs" else [option, source, destination]
        if environment is not None:
            argv.append("--clearenv")
            for name, value in environment.items():
                argv += ["--setenv", name, value]
        return [*argv, "--chdir", HOME]

    def inside(self, inner: Sequence[str], uid: int) -> list[str]:
        """``inner`` as bwrap starts it: as root, behind ``setpriv`` dropping to ``uid``."""
        if self.setpriv is None:
            return list(inner)
        return [
            self.setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            *inner,
        ]

    def binds(
        self,
        *,
        workdir: Path,
        sockets: Iterable[tuple[Path, str]],
        extra: Iterable[tuple[str, Path, str]] = (),
    ) -> list[tuple[str, str, str]]:
        """What the sandbox binds, in order: ``(option, source, destination)``."""
        binds: list[tuple[str, str, str]] = []
        for path in _SYSTEM + _SYSTEM_FILES:
            if os.path.islink(path):
                binds.append(("--symlink", os.readlink(path), path))
            elif os.path.exists(path):
                binds.append(("--ro-bind", path, path))
        for code in self.code_paths:
            binds.append(("--ro-bind", str(code), str(code)))
        binds.append(("--bind", str(workdir), HOME))
        for socket_file, destination in sockets:
            binds.append(("--ro-bind", str(socket_file), destination))
        for option, source, destination in extra:
            assert option in ("--ro-bind", "--bind", "--tmpfs"), option
            binds.append((option, str(source), destination))
        return binds

    def mount_plan(
        self, *, workdir: Path, sockets: Iterable[tuple[Path, str]]
    ) -> dict[str, object]:
        """The same mount view as ``command`` builds, for ``namespaces.build_root``."""
        binds = self.binds(workdir=workdir, sockets=sockets)
        return {
            "binds": [list(b) for b in binds],
            "dirs": _parents_to_create(d for _, _, d in binds),
            "home": HOME,
        }


@dataclass(slots=True)
class SealedCommand:
    """A sandbox's argv whose options travel in descriptors (``bwrap --args``, ``--seccomp``),
    so the sandbox's ``/proc/1/cmdline`` shows none of them; ``close`` once the child holds them."""

    argv: list[str]
    fds: tuple[int, ...]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def seal(
    bwrap: Bubblewrap,
    inner: Sequence[str],
    *,
    workdir: Path,
    sockets: Iterable[tuple[Path, str]],
    uid: int,
    extra: Iterable[tuple[str, Path, str]] = (),
    environment: Mapping[str, str] | None = None,
) -> SealedCommand:
    """``bwrap.command`` with its filter and ``options`` (the agent's environment among them) in
    memory files the child inherits: nothing of them is in an argv or a host environment."""
    seccomp_fd = _memory_file("society-seccomp", bwrap.seccomp)
    try:
        options = bwrap.options(
            workdir=workdir,
            sockets=sockets,
            uid=uid,
            seccomp_fd=seccomp_fd,
            extra=extra,
            environment=environment,
        )
        args_fd = _memory_file("society-bwrap-args", b"".join(o.encode() + b"\0" for o in options))
    except BaseException:
        os.close(seccomp_fd)
        raise
    argv = [bwrap.executable, "--args", str(args_fd), "--", *bwrap.inside(inner, uid)]
    return SealedCommand(argv, (seccomp_fd, args_fd))


def _memory_file(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # inheritable: no MFD_CLOEXEC
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class AgentUids:
    """The uids of one run's agents: a block of ``UID_BLOCK`` among ``UID_BLOCKS``, one per agent.

    The block is drawn from the run id's random bits; as root, the run holds a lock on it
    (``UID_CLAIMS``) while it lives, so two live runs never share a block (a run that finds its
    block held takes the next free one). Inside a user namespace (not root) the uids map to the
    user anyway, and each agent's namespace has keyrings of its own."""

    def __init__(self, run_id: str, *, claims: Path | None = None) -> None:
        self._block = int(run_id.removeprefix("sr-")[:8] or "0", 16) % UID_BLOCKS
        self._claims = claims if claims is not None else (UID_CLAIMS if os.geteuid() == 0 else None)
        self._claim: int | None = None
        self._block_held = 0
        self._next: int | None = None
        self._first = 0

    @property
    def first(self) -> int:
        if self._next is None:
            self._next = FIRST_AGENT_UID + self._claimed_block() * UID_BLOCK
            self._first = self._next
        return self._first

    def take(self) -> int:
        first = self.first
        assert self._next is not None
        if self._next >= first + UID_BLOCK:
            raise SandboxUnavailable(
                f"a local run hands out at most {UID_BLOCK} agent uids; shrink the roster",
                reason="sandbox-unavailable",
            )
        uid, self._next = self._next, self._next + 1
        return uid

    def release(self) -> None:
        """Let another run have the block (the lock also ends with this process); its claim file
        is removed while still locked, so claims do not pile up."""
        if self._claim is not None:
            assert self._claims is not None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._claims / str(self._block_held))
            os.close(self._claim)
            self._claim = None

    def _claimed_block(self) -> int:
        if self._claims is None:
            return self._block
        self._claims.mkdir(mode=0o700, parents=True, exist_ok=True)
        for offset in range(UID_BLOCKS):
            block = (self._block + offset) % UID_BLOCKS
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self._claims / str(block), flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if not _still_named(fd, self._claims / str(block)):
                os.close(fd)  # its holder released (and removed) it as we opened it: try again
                return self._claimed_block()
            self._claim, self._block_held = fd, block
            return block
        raise SandboxUnavailable(
            f"every block of agent uids under {self._claims} is held by a live run",
            reason="sandbox-unavailable",
        )


def _still_named(fd: int, path: Path) -> bool:
    """Is the locked file ``fd`` still the one ``path`` names (not removed by its releaser)?"""
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _parents_to_create(destinations: Iterable[str]) -> list[str]:
    """Ancestors of the mount points that bwrap would otherwise create with mode 0700."""
    bound = set(destinations)
    parents: set[str] = set()
    for destination in bound:
        parent = os.path.dirname(destination)
        while parent not in ("/", ""):
            parents.add(parent)
            parent = os.path.dirname(parent)
    covered = [b for b in bound if b not in parents]
    keep = [
        p for p in parents if not any(p == c or p.startswith(c.rstrip("/") + "/") for c in covered)
    ]
    return sorted(keep, key=lambda p: (p.count("/"), p))


def package_dirs(names: Iterable[str]) -> tuple[Path, ...]:
    """The folders of the project's packages ``names``, as real paths, found without importing
    them (the controller never imports the agent programs)."""
    found: list[Path] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SandboxUnavailable(
                f"the package {name!r} is not installed beside the controller: reinstall "
                "Society Runner (scripts/bootstrap.sh)",
                reason="sandbox-unavailable",
            )
        # an editable install's finder adds a path hook's name, which is no folder
        found.extend(
            Path(location).resolve()
            for location in spec.submodule_search_locations
            if Path(location).is_dir()
        )
    return tuple(found)


def _code_paths() -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """The Python runtime and the directories holding the agent packages, as real paths."""
    paths: list[Path] = []
    for prefix in {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix}:
        paths.append(Path(prefix).resolve())
    python_path: list[str] = []
    for package in package_dirs(AGENT_PACKAGES):
        paths.append(package)
        python_path.append(str(package.parent))
    unique: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(path.is_relative_to(u) for u in unique):
            unique.append(path)
    return tuple(unique), tuple(dict.fromkeys(python_path))


def python_executable() -> str:
    """The interpreter as the sandbox names it: its directory as a real path (symlinks outside
    are not bound), its own name kept (a venv's ``bin/python`` makes the venv's site-packages)."""
    executable = Path(sys.executable)
    return str(executable.parent.resolve() / executable.name)


@functools.cache
def _probe() -> Bubblewrap:
    executable = shutil.which("bwrap")
    if executable is None:
        raise SandboxUnavailable(
            "the local sandbox needs bubblewrap (bwrap), which is not installed: install it "
            "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; or "
            "scripts/install-sandbox.sh), or opt out with --unsandboxed (the ledger records it)",
            reason="sandbox-unavailable",
        )
    setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise SandboxUnavailable(
                "running as root, the local sandbox drops to an agent's own uid with setpriv "
                "(util-linux), which is not installed: install util-linux, or opt out with "
                "--unsandboxed (the ledger records it)",
                reason="sandbox-unavailable",
            )
    code_paths, python_path = _code_paths()
    try:
        program = compiled_filter()
    except FilterUnavailable as exc:
        raise SandboxUnavailable(
            f"the local sandbox's seccomp filter is compiled with libseccomp's Python bindings, "
            f"which no interpreter here has ({exc}): install them (Debian/Ubuntu: apt-get "
            "install python3-seccomp; or scripts/install-sandbox.sh), or opt out with "
            "--unsandboxed (the ledger records it)",
            reason="sandbox-unavailable",
        ) from exc
    bwrap = Bubblewrap(executable, _version(executable), setpriv, code_paths, python_path, program)
    # The probe's home is an empty directory of its own: binding "/" there would make bwrap
    # remount every mount on the host read-only, one by one, and fail whenever one of them (a
    # container's overlay, another sandbox's bind) goes away meanwhile.
    with tempfile.TemporaryDirectory(prefix="society-bwrap-probe-") as empty:
        os.chmod(empty, 0o755)
        seccomp_fd = _memory_file("society-seccomp", program)
        try:
            probe = bwrap.command(
                [python_executable(), "-c", "pass"],
                workdir=Path(empty),
                sockets=(),
                uid=FIRST_AGENT_UID,
                seccomp_fd=seccomp_fd,
            )
            probe[probe.index(HOME) - 2] = "--ro-bind"  # the probe writes nothing
            result = subprocess.run(
                probe, capture_output=True, timeout=30, check=False, pass_fds=(seccomp_fd,)
            )
        finally:
            os.close(seccomp_fd)
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise SandboxUnavailable(
            f"bubblewrap cannot build a sandbox here ({detail[-1] if detail else result.returncode}"
            "): enable unprivileged user namespaces (sysctl user.max_user_namespaces=15000 and, "
            "on Debian/Ubuntu, kernel.unprivileged_userns_clone=1 or the AppArmor userns "
            "setting), run as root, or opt out with --unsandboxed (the ledger records it)",
            reason="sandbox-unavailable",
        )
    return bwrap


def _version(executable: str) -> str:
    try:
        out = subprocess.run([executable, "--version"], capture_output=True, timeout=10)
        return out.stdout.decode(errors="replace").strip() or "bubblewrap"
    except (OSError, subprocess.SubprocessError):
        return "bubblewrap"
