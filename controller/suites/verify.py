"""``society suite verify``: re-verify every ledger, re-run the grader, recompute both files.

``suite.json`` must equal, byte for byte, what the evidence gives with its own ``timing``
section kept; ``leaderboard.md`` must equal it entirely. Any difference fails and is named. The
suite module is the caller's argument, never one the folder names: a handed-over folder is data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.suites.definition import SuiteError, load_suite
from controller.suites.evidence import RunEvidence
from controller.suites.layout import Journal, SuiteFolder
from controller.suites.report import compute, render_json, render_leaderboard
from ledger import LedgerError
from ledger.verification import verify_ledger


@dataclass(frozen=True, slots=True)
class SuiteVerification:
    suite: str
    runs: int
    ranked: int
    differences: list[str] = field(default_factory=list)
    trusted_key: str | None = None
    pinned: int | None = None
    """Runs whose ledger the trusted key signs wholly (None without a trusted key)."""

    @property
    def valid(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {
            "valid": self.valid,
            "suite": self.suite,
            "runs": self.runs,
            "ranked": self.ranked,
            "differences": self.differences,
        }
        if self.trusted_key is not None:
            line.update(trustedKey=self.trusted_key, pinned=self.pinned)
        return line


def verify_suite(
    directory: Path, *, module: Path, trusted_key: str | None = None
) -> SuiteVerification:
    """Recompute ``directory``'s suite.json and leaderboard.md and compare; raises
    ``SuiteError`` when the folder or the suite module cannot be read at all.

    ``module`` is the suite module the caller trusts: nothing the folder names is imported (its
    plan.json and generated matchup modules are data). With ``trusted_key`` every run's ledger
    must also be signed by that key, each one that is not is named as a difference."""
    folder = SuiteFolder(directory.resolve())
    suite = load_suite(module)
    if suite.id != folder.root.name:
        raise SuiteError(
            f"{folder.root} is not the folder of suite {suite.id!r} (pass DIR/{suite.id})",
            reason="suite-mismatch",
        )
    try:
        written_json = folder.suite_json.read_bytes()
        written_board = folder.leaderboard.read_bytes()
        written = json.loads(written_json)
        timing = written["timing"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SuiteError(
            f"{folder.root} lacks a readable suite.json with a timing section or a "
            f"leaderboard.md ({exc}); run `society suite run` to completion first",
            reason="suite-files-missing",
        ) from None
    report = compute(suite, folder, Journal.read(folder))
    differences = []
    if render_json(report.document, timing) != written_json:
        differences += [f"suite.json: {where}" for where in _where(report.document, written)]
        if not differences:
            differences.append("suite.json: same values, different bytes")
    if render_leaderboard(report) != written_board:
        differences.append("leaderboard.md: differs from the recomputed leaderboard")
    pinned = None
    if trusted_key is not None:
        pinned, unpinned = _pinned(folder, report.runs, trusted_key)
        differences += unpinned
    return SuiteVerification(
        suite.id, len(report.runs), report.ranked, differences, trusted_key, pinned
    )


def _pinned(folder: SuiteFolder, runs: list[RunEvidence], key: str) -> tuple[int, list[str]]:
    """How many runs' ledgers a signature by ``key`` wholly covers; a line for each other run."""
    pinned, problems = 0, []
    for run in runs:
        if run.run_id is None:
            continue
        try:
            verified = verify_ledger(
                None, folder.ledger(run.run_id), trusted_key=key, require_catalog=False
            )
        except LedgerError as exc:
            problems.append(
                f"runs[{run.slot.key}] ledger {run.run_id} is not signed by the trusted key "
                f"({exc.reason}: {exc.detail})"
            )
            continue
        if verified.signature == "pinned" and verified.unsigned_records == 0:
            pinned += 1
        else:
            problems.append(
                f"runs[{run.slot.key}] ledger {run.run_id} is only partly covered by the "
                f"trusted key ({verified.unsigned_records} unsigned records)"
            )
    return pinned, problems


def _where(expected: dict[str, Any], written: dict[str, Any]) -> list[str]:
    """Which fields differ, naming the run's slot for differences inside ``runs``."""
    found = []
    for key in sorted(set(expected) | set(written) - {"timing"}):
        if key == "timing" or expected.get(key) == written.get(key):
            continue
        if key == "runs" and isinstance(written.get(key), list):
            by_slot = {run.get("slot"): run for run in written["runs"] if isinstance(run, dict)}
            for run in expected["runs"]:
                other = by_slot.get(run["slot"])
                if other != run:
                    fields = sorted(
                        name
                        for name in set(run) | set(other or {})
                        if run.get(name) != (other or {}).get(name)
                    )
                    found.append(f"runs[{run['slot']}] {', '.join(fields)} recomputed differently")
            if len(by_slot) != len(expected["runs"]):
                found.append("runs: a different set of runs")
        else:
            found.append(f"{key} recomputed differently")
    return found
