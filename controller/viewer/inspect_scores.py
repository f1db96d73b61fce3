"""A grader's output as Inspect scores: each seat's own numbers on its sample, the run's on the log.

Each of a seat's fields is a scorer of its own (``scores["payoff"].value == 5``), so ``inspect
view`` gives it a column and ``samples_df`` a ``score_payoff`` column of numbers.

A seat's results are what the grader reports for that roster agent: a field that maps it to a
number or bool (``{"payoff": {"hawk": 5, "dove": 0}}`` gives hawk ``payoff=5``; a key may name
the seat as a sender id does, ``agent:hawk``; keys naming no seat are not any seat's), or to an
object of them (``{"seats": {"hawk": {"won": true}}}`` gives ``seats.won``); in a run of one
seat, the grader's top-level numbers and bools are that seat's. A run of several seats keeps its
top-level numbers and bools as its own.
Metrics (mean and stderr per field: over the samples that have it, and for the run's fields,
named ``run_<field>``, over the runs) are computed with ``inspect_ai``'s own metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inspect_ai.log import EvalScore

Scalar = int | float | bool
RUN_PREFIX = "run_"
"""The run's fields are ``run_<field>`` in the log's results."""


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | bool)


def _seat_key(key: str, seats: Iterable[str]) -> str | None:
    name = key.removeprefix("agent:")
    return name if name in seats else None


def seat_results(grade: Mapping[str, Any], seats: list[str]) -> dict[str, dict[str, Scalar]]:
    """Each seat's numbers and bools from the grader's output (empty where it reports none)."""
    results: dict[str, dict[str, Scalar]] = {seat: {} for seat in seats}
    for field, value in grade.items():
        if _scalar(value) and len(seats) == 1:
            results[seats[0]][field] = value
        if not isinstance(value, Mapping):
            continue
        for key, inner in value.items():
            seat = _seat_key(str(key), seats)
            if seat is None:
                continue
            if _scalar(inner):
                results[seat][field] = inner
            elif isinstance(inner, Mapping):
                results[seat].update(
                    {f"{field}.{name}": v for name, v in inner.items() if _scalar(v)}
                )
    return results


def run_results(grade: Mapping[str, Any], seats: list[str]) -> dict[str, Scalar]:
    """The run's own top-level numbers and bools (none for a run of one seat: they are its)."""
    if len(seats) == 1:
        return {}
    return {field: value for field, value in grade.items() if _scalar(value)}


def eval_scores(values: list[tuple[str, dict[str, Scalar]]], prefix: str = "") -> list[EvalScore]:
    """One ``EvalScore`` per field (named ``prefix`` + the field): its mean and stderr over the
    ``(id, fields)`` that have it."""
    from inspect_ai.log import EvalMetric, EvalScore
    from inspect_ai.scorer import SampleScore, Score, mean, stderr

    metrics = {"mean": mean(), "stderr": stderr()}
    fields = list(dict.fromkeys(field for _, fields in values for field in fields))
    scores = []
    for field in fields:
        scored = [
            SampleScore(score=Score(value=fields[field]), sample_id=sample_id)
            for sample_id, fields in values
            if field in fields
        ]
        scores.append(
            EvalScore(
                name=prefix + field,
                scorer=prefix + field,
                scored_samples=len(scored),
                unscored_samples=len(values) - len(scored),
                metrics={
                    name: EvalMetric(name=name, value=float(metric(scored)))  # type: ignore[arg-type]
                    for name, metric in metrics.items()
                },
            )
        )
    return scores
