"""Harvest on the local profile: copy declared workspace files and the log, by digest.

The working directory is the agent's, so every byte of it is hostile data: each declared path is
opened one component at a time beneath the directory, following no symbolic link (``O_NOFOLLOW``
on every component), and whatever goes wrong with one item is that item's outcome
(``unreadable`` with the reason), never the end of the harvest.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from controller.agents.runtime import Harvest
from controller.run.platform import HarvestedItem

_CHUNK = 1024 * 1024


def copy_declared(
    workdir: Path, log: Path, declared: Harvest, target: Path, run_dir: Path
) -> list[HarvestedItem]:
    """One item per declared file (and the log): harvested, absent, oversize or unreadable."""
    items = [
        _guarded("workspace", relative, workdir, target / "workspace" / relative,
                 declared.max_bytes, run_dir)
        for relative in declared.files
    ]  # fmt: skip
    if declared.logs:
        items.append(
            _guarded("log", log.name, log.parent, target / "logs" / log.name,
                     declared.max_bytes, run_dir)
        )  # fmt: skip
    return items


def _guarded(
    kind: str, name: str, root: Path, destination: Path, limit: int, run_dir: Path
) -> HarvestedItem:
    """One item's outcome, whatever the agent left there."""
    try:
        return _copy(kind, name, root, destination, limit, run_dir)
    except Exception as exc:  # hostile data: any failure is this item's, not the harvest's
        return HarvestedItem(
            kind=kind,  # type: ignore[arg-type]
            name=name,
            outcome="unreadable",
            limit_bytes=limit,
            detail=f"{type(exc).__name__}: {exc}"[:300],
        )


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def open_beneath(root: Path, relative: str) -> int:
    """A read descriptor for ``root/relative``, reached without following any link."""
    *directories, last = Path(relative).parts
    fd = os.open(root, _DIRECTORY)
    try:
        for part in directories:
            child = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        return os.open(last, _FILE, dir_fd=fd)
    finally:
        os.close(fd)


def _copy(
    kind: str, name: str, root: Path, destination: Path, limit: int, run_dir: Path
) -> HarvestedItem:
    def item(outcome: str, **fields: object) -> HarvestedItem:
        return HarvestedItem(kind=kind, name=name, outcome=outcome, limit_bytes=limit, **fields)  # type: ignore[arg-type]

    try:
        fd = open_beneath(root, name)
    except FileNotFoundError:
        return item("absent")
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return item("unreadable", detail="a symbolic link on the path (harvest follows none)")
        return item("unreadable", detail=f"{type(exc).__name__}: {exc.strerror or exc}")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return item("unreadable", detail="not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            return item("oversize", size=info.st_size)
        destination.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        try:
            with open(destination, "wb") as out:
                while chunk := handle.read(_CHUNK):
                    size += len(chunk)
                    if size > limit:  # it grew while we copied
                        break
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as exc:
            destination.unlink(missing_ok=True)
            return item("unreadable", detail=f"{type(exc).__name__}: {exc.strerror or exc}")
        if size > limit:
            destination.unlink(missing_ok=True)
            return item("oversize", size=size)
    return item(
        "harvested",
        sha256=digest.hexdigest(),
        size=size,
        artifact=str(destination.relative_to(run_dir)),
    )
