"""How the kernel reports where a run is: named phases and counters (admission, start, readiness).

The CLI renders these; a Temporal activity turns them into heartbeats. ``NO_PROGRESS`` ignores
everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Counter(Protocol):
    """A count towards ``total``; ``close()`` once, when done or abandoned."""

    def advance(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


class Progress(Protocol):
    def phase(self, text: str) -> None:
        """The run entered a new phase, e.g. ``"admitting roster"``."""
        ...

    def counter(self, label: str, total: int) -> Counter:
        """Start counting ``label`` towards ``total``, e.g. agents started."""
        ...

    def program_started(self, ledger_dir: Path) -> None:
        """The program runs now, its ledger at ``ledger_dir`` (a renderer may follow it until
        the next phase)."""
        ...


class _NoCounter:
    def advance(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


class NoProgress:
    """A ``Progress`` that reports nothing."""

    def phase(self, text: str) -> None:
        return None

    def counter(self, label: str, total: int) -> Counter:
        return _NoCounter()

    def program_started(self, ledger_dir: Path) -> None:
        return None


NO_PROGRESS: Progress = NoProgress()
