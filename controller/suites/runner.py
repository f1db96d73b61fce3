"""``society suite run``: every slot of a suite as a ``society run``, a few at a time, resumable.

Each run is started through the lifecycle's library entry point in a child process of its own
(``python -m controller.lifecycle.runner MODULE.py OPTIONS_JSON``: ``run_file`` with the slot's
seed, run id and parameters), at most ``jobs`` at once. The journal records a
slot's run id before the run starts; on a later invocation a slot whose latest run left a
complete ledger that verifies and records the program's outcome is kept; every other slot (never
finished, interrupted, or lost to the platform before or while its program ran: a failed readiness
gate, a refused roster, a lost cluster) runs again with a fresh run id.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from controller.lifecycle.runner import RunOptions
from controller.run.progress import NO_PROGRESS, Counter, Progress
from controller.run.runid import RUN_ID_PATTERN, new_run_id
from controller.settings import current
from controller.suites.definition import Slot, Suite
from controller.suites.layout import Journal, SuiteFolder, write_atomically
from controller.suites.report import SuiteReport, compute, render_json, render_leaderboard
from ledger import LedgerError
from ledger.verification import verify_ledger

RUNNER = (sys.executable, "-m", "controller.lifecycle.runner")
"""One run in a child process of its own, by this interpreter: the library's ``run_file``."""
DEFAULT_JOBS = 2
INTERRUPTED = "society.program-interrupted/v1"
PLATFORM_FAILED = "society.platform-failed/v1"
OUTCOMES = frozenset(
    {"society.program-succeeded/v2", "society.program-succeeded/v1", "society.program-failed/v1"}
)
"""What a kept run's ledger must record: the program ran and ended (well or not)."""


def run_argv(
    module: Path,
    *,
    profile: str,
    artifacts: Path,
    seed: int,
    run_id: str,
    settings: Mapping[str, Any] | None = None,
    include: Sequence[Path] = (),
) -> list[str]:
    """The one place the suite starts a run: ``RUNNER`` with the run's ``RunOptions`` (its
    RunSpec parameters; the suite's folder, which the generated module imports from, as an
    included folder)."""
    options = RunOptions(
        profile=profile,
        artifacts=artifacts,
        seed=seed,
        run_id=run_id,
        parameters=dict(settings or {}),
        include=tuple(include),
    )
    return [*RUNNER, str(module), options.model_dump_json()]


@dataclass(frozen=True, slots=True)
class SuiteRun:
    report: SuiteReport | None
    """``None`` when interrupted before every slot ran."""
    kept: int
    started: int
    interrupted: bool


class SuiteRunner:
    def __init__(
        self,
        suite: Suite,
        artifacts: Path,
        *,
        profile: str = "local",
        jobs: int = DEFAULT_JOBS,
        progress: Progress = NO_PROGRESS,
    ) -> None:
        self.suite = suite
        self.folder = SuiteFolder.of(artifacts, suite)
        self.profile = profile
        self.jobs = max(1, jobs)
        self.progress = progress
        self._live: dict[str, anyio.abc.Process] = {}
        self._interrupted = False
        # every run's --set values, checked (SuiteError) before any run starts
        self._settings = {slot.key: suite.settings_for(slot.competitors) for slot in suite.slots()}

    async def run(self, stop: anyio.Event) -> SuiteRun:
        """Run what is missing; on ``stop`` send each live run one SIGINT (it finalizes its
        ledger and cleans up), start nothing more, and return without a report."""
        started_at = time.monotonic()
        self.folder.write_plan(self.suite)
        journal = Journal.read(self.folder)
        slots = self.suite.slots()
        kept = [slot for slot in slots if self._completed(journal, slot)]
        pending = [slot for slot in slots if slot not in kept]
        self.progress.phase(
            f"suite {self.suite.id}: {len(slots)} runs, {len(kept)} already complete and "
            f"verified, {len(pending)} to run ({self.jobs} at a time) under {self.folder.root}"
        )
        bar = self.progress.counter("runs", len(slots))
        bar.advance(len(kept))
        limiter = anyio.CapacityLimiter(self.jobs)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._interrupt_on, stop)
                async with anyio.create_task_group() as runs:
                    for slot in pending:
                        runs.start_soon(self._run_slot, slot, journal, limiter, bar)
                group.cancel_scope.cancel()
        finally:
            bar.close()
        if self._interrupted:
            return SuiteRun(None, len(kept), len(pending), True)
        self.progress.phase("grading: verifying every ledger and running the grader")
        report = await anyio.to_thread.run_sync(compute, self.suite, self.folder, journal)
        timing = {
            "runs": {key: journal.seconds[key] for key in sorted(journal.seconds)},
            "invocationSeconds": round(time.monotonic() - started_at, 3),
        }
        write_atomically(self.folder.leaderboard, render_leaderboard(report).decode())
        write_atomically(self.folder.suite_json, render_json(report.document, timing).decode())
        return SuiteRun(report, len(kept), len(pending), False)

    def _completed(self, journal: Journal, slot: Slot) -> bool:
        """The slot's latest run finished while this suite watched, and its ledger is complete,
        verifies, and records the program's outcome. An interrupted run, or one the platform lost
        (its gate failed, its roster was refused, its cluster went away), says nothing about the
        competitors: it runs again."""
        run_id = journal.latest.get(slot.key)
        if run_id is None or slot.key not in journal.seconds or not RUN_ID_PATTERN.match(run_id):
            return False
        try:
            verified = verify_ledger(None, self.folder.ledger(run_id), require_catalog=False)
        except LedgerError:
            return False
        tags = {envelope.tag for envelope in verified.envelopes}
        return bool(tags & OUTCOMES) and not tags & {INTERRUPTED, PLATFORM_FAILED}

    async def _interrupt_on(self, stop: anyio.Event) -> None:
        await stop.wait()
        self._interrupted = True
        for process in list(self._live.values()):
            if process.returncode is None:
                process.send_signal(signal.SIGINT)

    async def _run_slot(
        self, slot: Slot, journal: Journal, limiter: anyio.CapacityLimiter, bar: Counter
    ) -> None:
        async with limiter:
            if self._interrupted:
                return
            module = self.folder.matchup_module(self.suite, slot)
            run_id = new_run_id()
            journal.started(slot, run_id)
            self.folder.logs.mkdir(parents=True, exist_ok=True)
            argv = run_argv(
                module,
                profile=self.profile,
                artifacts=self.folder.runs,
                seed=slot.seed,
                run_id=run_id,
                settings=self._settings[slot.key],
                include=() if self.suite.source is None else (self.suite.source.parent,),
            )
            began = time.monotonic()
            code = await self._spawn(argv, self.folder.logs / f"{run_id}.log", run_id)
            seconds = time.monotonic() - began
            journal.finished(slot, run_id, seconds, code)
            bar.advance()
            verdict = "ok" if code == 0 else f"exit {code}"
            self.progress.phase(f"{slot.key}: {run_id} {verdict} ({seconds:.1f}s)")

    async def _spawn(self, argv: Sequence[str], log: Path, run_id: str) -> int:
        with log.open("wb") as output:
            # Its own session: a terminal's Ctrl-C reaches the suite, which forwards exactly one
            # SIGINT (a second one would make `society run` stop without finalizing).
            process = await anyio.open_process(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
                env=dict(current().environ),
            )
            self._live[run_id] = process
            if self._interrupted:  # the stop came while this run was being started
                process.send_signal(signal.SIGINT)
            try:
                with anyio.CancelScope(shield=True):
                    code = await process.wait()
            finally:
                self._live.pop(run_id, None)
        return code
