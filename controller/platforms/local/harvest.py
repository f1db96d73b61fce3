"""Harvest on the local profile: copy declared workspace files and the log, by digest."""

from __future__ import annotations

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
        _copy("workspace", relative, workdir, workdir / relative, target / "workspace" / relative,
              declared.max_bytes, run_dir)
        for relative in declared.files
    ]  # fmt: skip
    if declared.logs:
        items.append(
            _copy("log", log.name, log.parent, log, target / "logs" / log.name,
                  declared.max_bytes, run_dir)
        )  # fmt: skip
    return items


def _copy(
    kind: str, name: str, root: Path, source: Path, destination: Path, limit: int, run_dir: Path
) -> HarvestedItem:
    def item(outcome: str, **fields: object) -> HarvestedItem:
        return HarvestedItem(kind=kind, name=name, outcome=outcome, limit_bytes=limit, **fields)  # type: ignore[arg-type]

    try:
        resolved = source.resolve(strict=True)
    except FileNotFoundError:
        return item("absent")
    except OSError as exc:
        return item("unreadable", detail=f"{type(exc).__name__}: {exc.strerror or exc}")
    if not resolved.is_relative_to(root.resolve()):
        return item("unreadable", detail="the path leads outside the working directory")
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
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
