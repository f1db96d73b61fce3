"""A folder tree deeper than a path may be long, made and removed through descriptors."""

from __future__ import annotations

import os
from pathlib import Path


def make_deep_tree(base: Path, depth: int) -> None:
    """``base/d/d/.../d/planted`` ``depth`` folders deep, made through descriptors (the path is
    longer than a path may be)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("planted", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def remove_deep_tree(base: Path) -> None:
    """Remove it again without recursion (shutil.rmtree recurses): lift each level's child up
    beside ``base/d``, empty and remove ``base/d``, and put the child in its place."""
    top, lifted = base / "d", base / "lifted"
    while top.exists():
        names = os.listdir(top)
        if "d" in names:
            os.rename(top / "d", lifted)
        for name in names:
            if name != "d":
                os.unlink(top / name)
        os.rmdir(top)
        if lifted.exists():
            os.rename(lifted, top)
