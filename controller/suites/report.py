"""``suite.json`` and ``leaderboard.md``: computed from the evidence alone, so they recompute.

``compute`` assesses every slot's latest attempt; ``render`` writes the two files' bytes. Only
the ``timing`` section of ``suite.json`` holds wall-clock figures, and it is the one part that
``society suite verify`` does not recompute.
"""

from __future__ import annotations

import json
import math
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
    NO_INTERVAL,
    PRIOR,
    Game,
    estimable_interval,
    mean_interval,
    rank_totals,
    rate,
    shared_ranks,
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
        **({"summary": _summary(suite, runs)} if suite.matchups == "replicates" else {}),
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
        "ranks": "shared by equal values",
    }
    if suite.matchups == "single":
        return {"ranking": "mean score", **common}
    if suite.matchups == "replicates":
        return {"ranking": "none: each numeric field summarized over seeds", **common}
    if suite.ranking == "score":
        method: dict[str, Any] = {"ranking": "total score", **common}
    else:
        method = {"ranking": "bradley-terry", "prior": PRIOR, "ties": "half a win each", **common}
    if suite.self_play:
        method["selfPlay"] = "played and reported, not ranked (a competitor against its twin)"
    return method


def _rankings(suite: Suite, runs: list[RunEvidence]) -> list[dict[str, Any]]:
    ranked = [run for run in runs if run.status == "ranked"]
    names = list(suite.competitors)
    seeds = [run.slot.seed for run in ranked]
    if suite.matchups == "single":
        return _mean_rows(names, ranked)
    if suite.matchups == "replicates":
        return []
    if suite.ranking == "score":
        payoffs = [
            (run.slot.competitor_of(seat), run.slot.seed, points)
            for run in ranked
            if not run.slot.self_play
            for seat, points in run.value.items()
        ]
        playing = [n for n in names if any(n == name for name, _, _ in payoffs)]
        rows = [
            {"competitor": t.name, "total": t.total, "interval": [t.low, t.high], "games": t.games}
            for t in rank_totals(playing, payoffs)
        ]
        return _ranked(rows, "total", estimable_interval(seeds))
    games = [
        Game(run.slot.competitors[0], run.slot.competitors[1], run.slot.seed, run.value)
        for run in ranked
        if not run.slot.self_play
    ]
    playing = [n for n in names if any(n in (g.first, g.second) for g in games)]
    rows = [{"competitor": rating.name, **rating.as_json()} for rating in rate(playing, games)]
    return _ranked(rows, "strength", estimable_interval(game.seed for game in games))


def _mean_rows(names: list[str], ranked: list[RunEvidence]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    estimable = True
    for name in names:
        scores = {
            run.slot.seed: float(run.value) for run in ranked if run.slot.competitors[0] == name
        }
        if scores:
            mean, low, high = mean_interval(scores)
            estimable = estimable and estimable_interval(scores)
            rows.append(
                {"competitor": name, "score": mean, "interval": [low, high], "runs": len(scores)}
            )
    rows.sort(key=lambda row: (-float(row["score"]), str(row["competitor"])))
    return _ranked(rows, "score", estimable)


def _summary(suite: Suite, runs: list[RunEvidence]) -> list[dict[str, Any]]:
    """Per competitor, per top-level numeric field of the grader's output (a boolean counts as
    0 or 1): its mean over the seeds, a bootstrap interval, and how many runs reported it."""
    results = [
        (run.slot.competitors[0], run.slot.seed, run.result)
        for run in runs
        if run.status == "ranked" and run.result is not None
    ]
    rows: list[dict[str, Any]] = []
    for name in suite.competitors:
        mine = [(seed, result) for competitor, seed, result in results if competitor == name]
        fields = sorted({key for _, result in mine for key, v in result.items() if _number(v)})
        for field in fields:
            scores = {
                seed: float(result[field]) for seed, result in mine if _number(result.get(field))
            }
            mean, low, high = mean_interval(scores)
            row: dict[str, Any] = {
                "competitor": name,
                "field": field,
                "mean": mean,
                "interval": [low, high],
                "runs": len(scores),
            }
            if not estimable_interval(scores):
                row = {**row, "interval": None, "intervalNote": NO_INTERVAL}
            rows.append(row)
    return rows


def _number(value: Any) -> bool:
    return isinstance(value, bool | int | float) and math.isfinite(value)


def _ranked(rows: list[dict[str, Any]], key: str, estimable: bool) -> list[dict[str, Any]]:
    """``rows`` (best first) with shared ranks, and no interval where none can be estimated."""
    ranks = shared_ranks([float(row[key]) for row in rows])
    out = []
    for rank, row in zip(ranks, rows, strict=True):
        if not estimable:
            row = {**row, "interval": None, "intervalNote": NO_INTERVAL}
        out.append({"rank": rank, **row})
    return out


def render_json(document: dict[str, Any], timing: dict[str, Any]) -> bytes:
    """``suite.json``'s bytes: the recomputable document, then its ``timing`` section last."""
    return (
        json.dumps({**document, "timing": timing}, indent=2, ensure_ascii=False) + "\n"
    ).encode()


def render_leaderboard(report: SuiteReport) -> bytes:
    doc = report.document
    lines = [f"# Suite `{doc['suite']}`", ""]
    lines.append(
        f"{len(doc['runs'])} runs ({doc['matchups']}, {len(doc['competitors'])} competitors, "
        f"seeds {', '.join(str(seed) for seed in doc['seeds'])}); {report.ranked} ranked, "
        f"{len(doc['reported'])} reported, not ranked. Grader `{doc['grader']['name']}`"
        + (
            ", every numeric field."
            if "summary" in doc
            else f", field `{doc['grader']['result']}`."
        )
    )
    lines.append("")
    lines += _summary_lines(doc) if "summary" in doc else _ranking_lines(doc)
    lines += [
        "",
        "## Runs",
        "",
        "| run | seed | status | result | cost (USD) |",
        "|---|---:|---|---|---:|",
    ]
    for run in doc["runs"]:
        result = run["result"] or {}
        field = doc["grader"]["result"]
        shown = (result.get(field, "-") if field else result) if run["status"] == "ranked" else "-"
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


def _ranking_lines(doc: dict[str, Any]) -> list[str]:
    method = doc["method"]
    places = method["decimals"]
    resamples = (
        f"{method['interval']:.0%} interval from {method['bootstrap']['samples']} bootstrap "
        f"resamples of the seeds (seed {method['bootstrap']['seed']}), rounded to {places} "
        f"places; equal values share a rank."
    )
    if method["ranking"] == "bradley-terry":
        self_play = " Self-play games are played and reported, not rated." * ("selfPlay" in method)
        head = (
            f"Bradley-Terry log-strengths (prior {method['prior']}, a tie is half a win each "
            f"side), {resamples}{self_play}"
        )
        columns, value = ["W", "L", "T"], "strength"
    elif method["ranking"] == "total score":
        twin = " Self-play games are played and reported, not counted." * ("selfPlay" in method)
        head = f"Total payoff over every game against another competitor, {resamples}{twin}"
        columns, value = ["games"], "total"
    else:
        head = f"Mean score over seeds, {resamples}"
        columns, value = ["runs"], "score"
    lines = [head, "", f"| rank | competitor | {value} | interval | {' | '.join(columns)} |"]
    lines.append("|---:|---|---:|---|" + "---:|" * len(columns))
    keys = {"W": "wins", "L": "losses", "T": "ties", "games": "games", "runs": "runs"}
    notes: set[str] = set()
    for row in doc["rankings"]:
        shown = _interval_cell(row, places, notes)
        cells = " | ".join(str(row[keys[column]]) for column in columns)
        lines.append(
            f"| {row['rank']} | {row['competitor']} | {row[value]:.{places}f} | {shown} | {cells} |"
        )
    if not doc["rankings"]:
        lines.append("| - | no ranked runs | | | | | |")
    lines += [f"\nNote: {note}." for note in sorted(notes)]
    return lines


def _interval_cell(row: dict[str, Any], places: int, notes: set[str]) -> str:
    """A row's interval as the leaderboard shows it; one that cannot be estimated adds its note."""
    if row["interval"] is None:
        notes.add(row["intervalNote"])
        return "n/a (one seed)"
    low, high = row["interval"]
    return f"[{low:.{places}f}, {high:.{places}f}]"


def _summary_lines(doc: dict[str, Any]) -> list[str]:
    method = doc["method"]
    places = method["decimals"]
    lines = [
        f"Replicates, not ranked: each numeric field of the grader's output, its mean over the "
        f"seeds and a {method['interval']:.0%} interval from {method['bootstrap']['samples']} "
        f"bootstrap resamples of the seeds (seed {method['bootstrap']['seed']}), rounded to "
        f"{places} places; a boolean counts as 0 or 1.",
        "",
        "| competitor | field | mean | interval | runs |",
        "|---|---|---:|---|---:|",
    ]
    notes: set[str] = set()
    for row in doc["summary"]:
        shown = _interval_cell(row, places, notes)
        lines.append(
            f"| {row['competitor']} | {_cell(row['field'])} | {row['mean']:.{places}f} "
            f"| {shown} | {row['runs']} |"
        )
    if not doc["summary"]:
        lines.append("| - | no graded runs | | | |")
    lines += [f"\nNote: {note}." for note in sorted(notes)]
    return lines


def _cell(value: Any) -> str:
    if value is None:
        return "tie"
    if isinstance(value, dict):
        value = ", ".join(f"{seat}={points}" for seat, points in value.items())
    return str(value).replace("|", "\\|")


def _cost(usage: dict[str, Any] | None) -> str:
    if usage is None:
        return "no model use"
    cost = usage["total"]["costUsd"]
    return "unknown" if cost is None else f"{cost:.6f}"
