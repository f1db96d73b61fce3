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
    """Remove it again without recursion (shutil.rmtree recurses)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    chain = [fd]
    while True:
        try:
            chain.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=chain[-1]))
        except FileNotFoundError:
            break
        if len(chain) > 64:  # keep few descriptors open: walk on from the deepest one
            os.close(chain.pop(0))
    deepest = chain.pop()
    for name in os.listdir(deepest):
        os.unlink(name, dir_fd=deepest)
    os.close(deepest)
    for fd in chain:
        os.close(fd)
    while (base / "d").exists():
        current = base
        parent_fd = os.open(current, os.O_RDONLY | os.O_DIRECTORY)
        while True:
            try:
                child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent_fd)
            except FileNotFoundError:
                break
            if not os.listdir(child):
                os.close(child)
                os.rmdir("d", dir_fd=parent_fd)
                break
            os.close(parent_fd)
            parent_fd = child
        os.close(parent_fd)
