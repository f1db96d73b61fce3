"""Trees an agent wrote, treated as hostile data: removed iteratively, never through a link.

An agent controls what its working directory holds: thousands of nested directories (deeper than
the recursion limit and than ``PATH_MAX``), symbolic links, loops of them, directories it made
unreadable. Removal walks one directory descriptor at a time (``dir_fd``, ``O_NOFOLLOW``), keeps
going past an entry it cannot remove, and returns what it could not remove instead of raising.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Level:
    """One directory on the way down: its name in its parent, its identity, what stays."""

    name: str
    identity: tuple[int, int]
    kept: set[str] = field(default_factory=set)


def remove_tree(path: Path) -> list[str]:
    """Delete ``path`` and everything below it; returns one line per entry left behind."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [f"{path}: {exc.strerror or exc}"]
    if not stat.S_ISDIR(info.st_mode):
        return _unlink(path, None, str(path))
    opened = _open_directory(str(path), None)
    if isinstance(opened, str):
        return [f"{path}: {opened}"]
    fd = opened
    problems: list[str] = []
    levels = [_Level(str(path), (info.st_dev, info.st_ino))]
    while True:
        child = _empty_out(fd, levels[-1], problems)
        if child is not None:  # go down into it
            name, child_fd, identity = child
            os.close(fd)
            fd = child_fd
            levels.append(_Level(name, identity))
            continue
        done = levels.pop()
        if not levels:
            os.close(fd)
            if not done.kept:
                problems += _rmdir(path, None, str(path))
            return problems
        parent = _parent(fd, levels[-1])
        os.close(fd)
        if parent is None:
            problems.append(f"{path}: a directory moved while it was removed; stopped")
            return problems
        fd = parent
        failed = _rmdir(Path(done.name), fd, done.name)
        if failed:
            problems += failed
            levels[-1].kept.add(done.name)


def _empty_out(
    fd: int, level: _Level, problems: list[str]
) -> tuple[str, int, tuple[int, int]] | None:
    """Unlink every non-directory in ``fd``; return the first subdirectory still to empty."""
    try:
        names = os.listdir(fd)
    except OSError as exc:
        problems.append(f"{level.name}: {exc.strerror or exc}")
        level.kept.add("")
        return None
    for name in names:
        if name in level.kept:
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror or exc}")
            level.kept.add(name)
            continue
        if not stat.S_ISDIR(info.st_mode):
            failed = _unlink(Path(name), fd, name)
            if failed:
                problems += failed
                level.kept.add(name)
            continue
        opened = _open_directory(name, fd)
        if isinstance(opened, int):
            return name, opened, (info.st_dev, info.st_ino)
        problems.append(f"{name}: {opened}")
        level.kept.add(name)
    return None


def _open_directory(name: str, parent: int | None) -> int | str:
    """A descriptor for ``name`` (made searchable first if the agent locked it), or why not."""
    for attempt in range(2):
        try:
            fd = os.open(name, _DIRECTORY, dir_fd=parent)
        except PermissionError:
            if attempt:
                return "permission denied"
            try:
                os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
            except OSError as exc:
                return exc.strerror or str(exc)
        except OSError as exc:
            return exc.strerror or str(exc)
        else:
            try:
                os.fchmod(fd, 0o700)  # its entries may be unlinked, whatever mode the agent set
            except OSError:
                pass
            return fd
    return "permission denied"


def _parent(fd: int, expected: _Level) -> int | None:
    """The directory above ``fd``, if it is still the one we came down from."""
    try:
        parent = os.open("..", _DIRECTORY, dir_fd=fd)
    except OSError:
        return None
    info = os.fstat(parent)
    if (info.st_dev, info.st_ino) != expected.identity:
        os.close(parent)
        return None
    return parent


def _unlink(path: Path, dir_fd: int | None, shown: str) -> list[str]:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return [f"{shown}: {exc.strerror or exc}"]
    return []


def _rmdir(path: Path, dir_fd: int | None, shown: str) -> list[str]:
    try:
        os.rmdir(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            return [f"{shown}: something in it could not be removed"]
        return [f"{shown}: {exc.strerror or exc}"]
    return []
