"""Helpers for the NanoClaw tests: an agent's processes, found from /proc."""

from __future__ import annotations

import itertools
from pathlib import Path


def processes_of(run_id: str, agent: str) -> list[int]:
    """Every live process whose command line names the run and the agent, and its descendants."""
    parents: dict[int, int] = {}
    roots: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(stat[1])
        except (OSError, ValueError):
            continue
        if any(a == run_id.encode() and b == agent.encode() for a, b in itertools.pairwise(argv)):
            roots.append(int(entry.name))
    found = list(roots)
    for pid in found:
        found.extend(child for child, parent in parents.items() if parent == pid)
    return found


def command_line(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""
