"""The local budget a complete roster is admitted against."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from controller.events.run import Capacity


@dataclass(frozen=True, slots=True)
class LocalCapacity:
    """The local budget the complete roster is admitted against."""

    cpu: float
    memory_mib: int
    agents: int = 256

    @classmethod
    def detect(cls) -> LocalCapacity:
        """This machine's usable cores and memory (80% of it), and 256 agents."""
        try:
            cores = float(len(os.sched_getaffinity(0)))
        except AttributeError:
            cores = float(os.cpu_count() or 1)
        return cls(cpu=cores, memory_mib=int(_memory_total_mib() * 0.8))

    def as_event(self) -> Capacity:
        return Capacity(cpu=self.cpu, memory_mib=self.memory_mib, agents=self.agents)


def _memory_total_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4096
