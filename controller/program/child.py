"""How the module's process starts: in a sandbox of its own, or as a plain child, and what it sees.

Sandboxed (the local profile), it is the agents' bubblewrap sandbox around the user who runs
``society``: no capabilities, ``no_new_privs``, a fresh session keyring, the default-deny seccomp
filter, no network, its own PID namespace; the system and the Python runtime read-only, the
module's folder and the import path read-only (``module_folders``: plus ``--include``, and
``--writable`` folders to write), an empty home. Plain (``--unsandboxed``, and the controller
Job, whose container has no user namespaces), it is a process of the same user. Either way it
gets ``society run``'s environment without the controller's settings.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from controller.run.spec import RunSpecError
from controller.settings import current

if TYPE_CHECKING:
    from controller.platforms.local.cgroup import AgentCgroup

MODULE_MEMORY_LIMIT_MIB = 1024
"""The module's process's memory limit, as an agent's by default."""


def module_environment() -> dict[str, str]:
    """``society run``'s environment without the controller's own settings: a module that reads
    its configuration from the environment still does."""
    return current().without_controller_settings()


MODULE_PACKAGES = ("controller", "ledger")
"""What the module's process imports of this project besides an agent's packages: its host and
``ctx``'s proxies."""


def _module_packages() -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """The folders of ``MODULE_PACKAGES`` and the import path that finds them."""
    from controller.platforms.local.sandbox import package_dirs

    folders = package_dirs(MODULE_PACKAGES)
    return folders, tuple(dict.fromkeys(str(folder.parent) for folder in folders))


def _command(module_path: Path, fd: int, python: str) -> list[str]:
    return [python, "-m", "controller.program.host", str(fd), str(module_path)]


def spawn_plain(module_path: Path, there: socket.socket) -> subprocess.Popen[bytes]:
    from controller.platforms.local.launch import agent_python_path

    env = module_environment()
    given = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    # the project's packages first, then what this process was given (an image's libraries)
    _, module_path_entries = _module_packages()
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([*agent_python_path(), *module_path_entries, *given])
    )
    return subprocess.Popen(
        _command(module_path, there.fileno(), sys.executable),
        pass_fds=(there.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=_output(),
        env=env,
        start_new_session=True,
    )


class Sandbox:
    """The module process's sandbox: its folders, and an empty home ``release`` removes.

    It runs as the user who runs ``society`` (so what it writes is theirs), with no capabilities,
    ``no_new_privs``, a fresh session keyring and the default-deny seccomp filter: what it may
    touch is what its mount namespace holds, and that holds no key file, run directory or ledger.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self.home = folder / "home"
        self._cgroup: AgentCgroup | None = None

    @classmethod
    def claim(cls) -> Sandbox:
        return cls(Path(tempfile.mkdtemp(prefix="society-module-")))

    def spawn(
        self, module_path: Path, there: socket.socket, folders: Folders
    ) -> subprocess.Popen[bytes]:
        from controller.platforms.local.launch import fresh_session_keyring, in_cgroups
        from controller.platforms.local.sandbox import HOME, Bubblewrap, python_executable, seal

        bwrap = Bubblewrap.probe()
        self.home.mkdir(mode=0o700)
        python = python_executable()
        packages, package_path = _module_packages()
        code = bwrap.code_paths
        readable = [
            *(p for p in packages if not any(p.is_relative_to(r) for r in folders.readable)),
            *folders.readable,
        ]
        binds = [
            ("--ro-bind", path, str(path))
            for path in readable
            if not any(path.is_relative_to(c) for c in code)
        ]
        binds += [("--bind", path, str(path)) for path in folders.writable]
        # after the folders that hold them: an empty folder or file in their place
        empty = self._folder / "empty"
        empty.touch(mode=0o444)
        binds += [
            ("--tmpfs", path, str(path)) if path.is_dir() else ("--ro-bind", empty, str(path))
            for path in folders.masked
        ]
        env = {
            **module_environment(),
            "PATH": os.pathsep.join([str(Path(python).parent), "/usr/bin", "/bin"]),
            "HOME": HOME,
            "PYTHONPATH": os.pathsep.join(dict.fromkeys([*bwrap.python_path, *package_path])),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        # the module's environment reaches only its process inside the sandbox; the host-side
        # launcher and bwrap run with a fixed one
        sealed = seal(
            bwrap,
            _command(module_path, there.fileno(), python),
            workdir=self.home,
            sockets=(),
            uid=os.geteuid(),
            extra=binds,
            environment=env,
        )
        procs = self._cgroup_procs()
        try:
            return subprocess.Popen(
                in_cgroups(procs, fresh_session_keyring(sealed.argv)),
                pass_fds=(there.fileno(), *sealed.fds),
                stdin=subprocess.DEVNULL,
                stdout=_output(),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                start_new_session=True,
            )
        finally:
            sealed.close()

    def _cgroup_procs(self) -> tuple[str, ...]:
        """Its own pids and memory groups, as an agent's (where this machine lets the controller
        make them): the ``cgroup.procs`` files its first process joins before anything runs."""
        from controller.platforms.local.cgroup import DEFAULT_PIDS_MAX, layout_or_none

        layout = layout_or_none()
        if layout is None:
            return ()
        try:
            self._cgroup = layout.create(
                f"module.{self._folder.name}",
                "program",
                pids_max=DEFAULT_PIDS_MAX,
                memory_bytes=MODULE_MEMORY_LIMIT_MIB << 20,
            )
        except OSError:
            return ()
        return self._cgroup.procs_files

    def release(self) -> None:
        if self._cgroup is not None:
            self._cgroup.kill()
            self._cgroup.remove()
            for directory in self._cgroup.directories:
                try:
                    directory.parent.rmdir()
                except OSError:
                    pass
        shutil.rmtree(self._folder, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Folders:
    """What the sandboxed module process sees of this machine's files besides the system and the
    Python runtime: ``readable`` (read-only) and ``writable``, as real paths, none inside
    another."""

    readable: tuple[Path, ...]
    writable: tuple[Path, ...]
    masked: tuple[Path, ...] = ()
    """The controller's own files inside a readable folder (the artifact root, the operator's
    key): the sandbox shows them empty."""


def module_folders(
    module_path: Path,
    include: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    protected: Sequence[Path] = (),
) -> Folders:
    """The module's folder, ``include``, and every folder on this interpreter's import path (an
    editable install's source among them) to read; ``writable`` to write. ``protected`` (the
    artifact root with every run directory and Temporal's state, the operator's key) are masked
    in what it reads, and a writable folder holding one is refused."""
    written = _unique(_folders(writable, "--writable"))
    guarded = [path.resolve() for path in protected]
    for folder in written:
        held = [path for path in guarded if path.is_relative_to(folder) or folder == path]
        if held:
            raise RunSpecError(
                f"--writable {folder} holds {', '.join(map(str, held))}, which the module's "
                "process may not write: the run's ledger, the other runs and Temporal's state "
                "live there, or the operator's key",
                reason="folder-holds-controller-files",
                next_step="give the module a folder of its own to write, outside the artifact root",
            )
    found = [module_path.parent.resolve(), *_folders(include, "--include")]
    found += [Path(e).resolve() for e in sys.path if e and os.path.isabs(e) and os.path.isdir(e)]
    readable = [
        path
        for path in _unique(found)
        if not any(path.is_relative_to(w) or w.is_relative_to(path) for w in written)
    ]
    masked = [
        path
        for path in guarded
        if path.exists() and any(path.is_relative_to(folder) for folder in readable)
    ]
    if any(path in masked for path in readable):  # a readable folder that is itself protected
        readable = [path for path in readable if path not in masked]
    return Folders(tuple(readable), tuple(written), tuple(masked))


def _folders(given: Sequence[Path], option: str) -> list[Path]:
    resolved = [folder.resolve() for folder in given]
    for folder, path in zip(given, resolved, strict=True):
        if not path.is_dir():
            raise RunSpecError(
                f"{option} {folder} is not a folder",
                reason="folder-missing",
                next_step=f"create {folder} or drop {option}",
            )
    return resolved


def _unique(paths: Sequence[Path]) -> list[Path]:
    unique: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(path.is_relative_to(kept) for kept in unique):
            unique.append(path)
    return unique


def _output() -> int | None:
    """Where the module's prints go: this process's stderr, so stdout keeps the result line."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None
