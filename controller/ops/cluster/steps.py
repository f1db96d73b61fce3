"""A small runner of named install steps: one progress line per step with what it did and how
long it took. Each step is idempotent on its own (it checks, then changes only what differs), so
running the whole sequence again is how a half-finished ``cluster up`` is resumed."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from controller.errors import OpsError


class StepFailed(OpsError):
    """A step could not finish; ``reason`` is machine-readable, the message says what next."""

    reason = "step-failed"


@dataclass(frozen=True, slots=True)
class Step:
    """``run`` returns one short line of what it did ("created", "reused", "skipped: ...")."""

    name: str
    run: Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class StepRecord:
    name: str
    outcome: str
    seconds: float


class StepRunner:
    """Runs steps in order and prints ``[i/n] name ... outcome (t s)`` for each to ``out``."""

    def __init__(self, out: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self.records: list[StepRecord] = []

    async def run(self, steps: Sequence[Step]) -> list[StepRecord]:
        """Every step in order; the first failure stops the sequence (``StepFailed``, named)."""
        width = max((len(step.name) for step in steps), default=0)
        for index, step in enumerate(steps, 1):
            prefix = f"[{index}/{len(steps)}] {step.name.ljust(width)}"
            print(f"{prefix} ...", file=self._out, flush=True)
            started = self._clock()
            try:
                outcome = await step.run()
            except StepFailed as failed:
                elapsed = self._clock() - started
                print(f"{prefix} FAILED ({elapsed:.1f} s)", file=self._out, flush=True)
                raise StepFailed(f"step '{step.name}': {failed}", reason=failed.reason) from failed
            elapsed = self._clock() - started
            self.records.append(StepRecord(step.name, outcome, elapsed))
            print(f"{prefix} {outcome} ({elapsed:.1f} s)", file=self._out, flush=True)
        return self.records
