"""``suite.json`` and ``leaderboard.md``: computed from the evidence alone, so they recompute.

``compute`` assesses every slot's latest attempt; ``render`` writes the two files' bytes. Only
the ``timing`` section of ``suite.json`` holds wall-clock figures, and it is the one part that
``society suite verify`` does not recompute.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.suites.definition import Suite, file_digest
from controller.suites.evidence import RunEvidence, assess
from controller.suites.layout import Journal, SuiteFolder
from controller.suites.ratings import (
    BOOTSTRAP_SAMPLES,
    BOOTSTRAP_SEED,
    DECIMALS,
    INTERVAL,
    PRIOR,
    Game,
    mean_interval,
    rate,
)
from ledger.grading import load_module

SUITE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SuiteReport:
    document: dict[str, Any]
    """``suite.json`` without ``timing``."""
    runs: list[RunEvidence]

    @property
    def ranked(self) -> int:
        return sum(1 for run in self.runs if run.status == "ranked")


def compute(
    suite: Suite,
    folder: SuiteFolder,
    journal: Journal,
    *,
    on_run: Callable[[RunEvidence], None] | None = None,
) -> SuiteReport:
    grader_path = suite.grader_path()
    grader = load_module(grader_path)
    runs = []
    for slot in suite.slots():
        run_id = journal.latest.get(slot.key)
        ledger_dir = folder.ledger(run_id) if run_id else folder.root
        evidence = assess(suite, grader, slot, run_id, ledger_dir)
        runs.append(evidence)
        if on_run is not None:
            on_run(evidence)
    assert suite.source is not None
    document: dict[str, Any] = {
        "suiteFormat": SUITE_FORMAT,
        "suite": suite.id,
        "module": {"name": suite.source.name, "sha256": file_digest(suite.source)},
        "grader": {
            "name": grader_path.name,
            "sha256": file_digest(grader_path),
            "result": suite.result,
        },
        "matchups": suite.matchups,
        "competitors": list(suite.competitors),
        "seeds": list(suite.seeds),
        "method": _method(suite),
        "rankings": _rankings(suite, runs),
        "runs": [run.as_json() for run in runs],
        "reported": [
            {"slot": run.slot.key, "runId": run.run_id, "status": run.status, "reason": run.reason}
            for run in runs
            if run.status != "ranked"
        ],
    }
    return SuiteReport(document, runs)


def _method(suite: Suite) -> dict[str, Any]:
    common = {
        "bootstrap": {"samples": BOOTSTRAP_SAMPLES, "seed": BOOTSTRAP_SEED, "over": "seeds"},
        "interval": INTERVAL,
        "decimals": DECIMALS,
    }
    if suite.matchups == "single":
        return {"ranking": "mean score", **common}
    return {"ranking": "bradley-terry", "prior": PRIOR, "ties": "half a win each", **common}


def _rankings(suite: Suite, runs: list[RunEvidence]) -> list[dict[str, Any]]:
    ranked = [run for run in runs if run.status == "ranked"]
    names = list(suite.competitors)
    if suite.matchups == "pairs":
        games = [
            Game(run.slot.competitors[0], run.slot.competitors[1], run.slot.seed, run.value)
            for run in ranked
        ]
        playing = [n for n in names if any(n in (g.first, g.second) for g in games)]
        return [
            {"rank": place, "competitor": rating.name, **rating.as_json()}
            for place, rating in enumerate(rate(playing, games), start=1)
        ]
    rows: list[dict[str, Any]] = []
    for name in names:
        scores = {
            run.slot.seed: float(run.value) for run in ranked if run.slot.competitors[0] == name
        }
        if scores:
            mean, low, high = mean_interval(scores)
            rows.append(
                {"competitor": name, "score": mean, "interval": [low, high], "runs": len(scores)}
            )
    rows.sort(key=lambda row: (-float(row["score"]), str(row["competitor"])))
    return [{"rank": place, **row} for place, row in enumerate(rows, start=1)]


def render_json(document: dict[str, Any], timing: dict[str, Any]) -> bytes:
    """``suite.json``'s bytes: the recomputable document, then its ``timing`` section last."""
    return (
        json.dumps({**document, "timing": timing}, indent=2, ensure_ascii=False) + "\n"
    ).encode()


def render_leaderboard(report: SuiteReport) -> bytes:
    doc = report.document
    method = doc["method"]
    lines = [f"# Suite `{doc['suite']}`", ""]
    lines.append(
        f"{len(doc['runs'])} runs ({doc['matchups']}, {len(doc['competitors'])} competitors, "
        f"seeds {', '.join(str(seed) for seed in doc['seeds'])}); {report.ranked} ranked, "
        f"{len(doc['reported'])} reported, not ranked. Grader `{doc['grader']['name']}`, "
        f"field `{doc['grader']['result']}`."
    )
    lines.append("")
    interval = f"{method['interval']:.0%} interval"
    if doc["matchups"] == "pairs":
        lines.append(
            f"Bradley-Terry log-strengths (prior {method['prior']}, a tie is half a win each "
            f"side), {interval} from {method['bootstrap']['samples']} bootstrap resamples of the "
            f"seeds (seed {method['bootstrap']['seed']}), rounded to {method['decimals']} places."
        )
        lines += [
            "",
            "| rank | competitor | strength | interval | W | L | T |",
            "|---:|---|---:|---|---:|---:|---:|",
        ]
        for row in doc["rankings"]:
            low, high = row["interval"]
            lines.append(
                f"| {row['rank']} | {row['competitor']} | {row['strength']:.{method['decimals']}f} "
                f"| [{low:.{method['decimals']}f}, {high:.{method['decimals']}f}] "
                f"| {row['wins']} | {row['losses']} | {row['ties']} |"
            )
    else:
        lines.append(
            f"Mean score over seeds, {interval} from {method['bootstrap']['samples']} bootstrap "
            f"resamples (seed {method['bootstrap']['seed']}), rounded to {method['decimals']} "
            "places."
        )
        lines += ["", "| rank | competitor | score | interval | runs |", "|---:|---|---:|---|---:|"]
        for row in doc["rankings"]:
            low, high = row["interval"]
            lines.append(
                f"| {row['rank']} | {row['competitor']} | {row['score']:.{method['decimals']}f} "
                f"| [{low:.{method['decimals']}f}, {high:.{method['decimals']}f}] | {row['runs']} |"
            )
    if not doc["rankings"]:
        lines.append("| - | no ranked runs | | | | | |")
    lines += [
        "",
        "## Runs",
        "",
        "| run | seed | status | result | cost (USD) |",
        "|---|---:|---|---|---:|",
    ]
    for run in doc["runs"]:
        result = run["result"] or {}
        shown = result.get(doc["grader"]["result"], "-") if run["status"] == "ranked" else "-"
        lines.append(
            f"| {' vs '.join(run['competitors'])} | {run['seed']} | {run['status']} "
            f"| {_cell(shown)} | {_cost(run['usage'])} |"
        )
    lines += ["", "## Reported, not ranked", ""]
    if doc["reported"]:
        for entry in doc["reported"]:
            lines.append(
                f"- `{entry['slot']}` ({entry['runId'] or 'no run'}): {entry['status']}, "
                f"{entry['reason']}"
            )
    else:
        lines.append("None: every run verified and was graded.")
    return ("\n".join(lines) + "\n").encode()


def _cell(value: Any) -> str:
    if value is None:
        return "tie"
    return str(value).replace("|", "\\|")


def _cost(usage: dict[str, Any] | None) -> str:
    if usage is None:
        return "no model use"
    cost = usage["total"]["costUsd"]
    return "unknown" if cost is None else f"{cost:.6f}"
