"""``society suite verify``: re-verify every ledger, re-run the grader, recompute both files.

``suite.json`` must equal, byte for byte, what the evidence gives with its own ``timing``
section kept; ``leaderboard.md`` must equal it entirely. Any difference fails and is named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.suites.definition import SuiteError, load_suite
from controller.suites.layout import Journal, SuiteFolder
from controller.suites.report import compute, render_json, render_leaderboard


@dataclass(frozen=True, slots=True)
class SuiteVerification:
    suite: str
    runs: int
    ranked: int
    differences: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "suite": self.suite,
            "runs": self.runs,
            "ranked": self.ranked,
            "differences": self.differences,
        }


def verify_suite(directory: Path, *, module: Path | None = None) -> SuiteVerification:
    """Recompute ``directory``'s suite.json and leaderboard.md and compare; raises
    ``SuiteError`` when the folder or its suite module cannot be read at all."""
    folder = SuiteFolder(directory.resolve())
    suite = load_suite(module or folder.plan_module())
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
    return SuiteVerification(suite.id, len(report.runs), report.ranked, differences)


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
