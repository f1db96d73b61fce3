"""Inline SVG plots of a grader field across a suite's runs: one mark per run (per seat for a
field that maps seats to numbers), a row per competitor or matchup, coloured by seed.

Numbers are a strip plot with a box (quartiles, median, range) per row on a shared value axis;
anything else (names, booleans, ``null``, objects) is a dot plot of the values as categories.
Every mark carries ``data-run`` and a ``<title>`` naming its run, seed and value.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 720
ROW = 34
TOP = 26
BOTTOM = 44
RIGHT = 24
CHAR = 7.0
"""Rough width of one 12px label character: enough to size the left margin."""
SEED_COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777")
MAX_CATEGORIES = 12


@dataclass(frozen=True, slots=True)
class Mark:
    """One value of a field: the row it belongs to (a competitor or a matchup), its run, seed."""

    row: str
    value: object
    run_id: str
    seed: int


def is_number(value: object) -> bool:
    """A finite int or float; a boolean is a category here, not a number."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def field_plot(field: str, marks: Sequence[Mark], seeds: Sequence[int]) -> str:
    """The ``<svg>`` of one field: a strip plot when every value is a number, else a dot plot."""
    if marks and all(is_number(mark.value) for mark in marks):
        return _strip_plot(field, marks, seeds)
    return _dot_plot(field, marks, seeds)


def _rows(marks: Sequence[Mark]) -> list[str]:
    return list(dict.fromkeys(mark.row for mark in marks))


def _left(rows: Sequence[str]) -> float:
    return min(220.0, 16.0 + CHAR * max((len(row) for row in rows), default=4))


def _colour(seed: int, seeds: Sequence[int]) -> str:
    index = list(seeds).index(seed) if seed in seeds else len(seeds)
    return SEED_COLOURS[index % len(SEED_COLOURS)]


def _mark(x: float, y: float, mark: Mark, seeds: Sequence[int], shown: str) -> str:
    return (
        f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{_colour(mark.seed, seeds)}" '
        f'fill-opacity="0.85" stroke="#fff" data-run="{escape(mark.run_id)}" '
        f'data-seed="{mark.seed}" data-row="{escape(mark.row)}" data-value="{escape(shown)}">'
        f"<title>{escape(mark.row)}, seed {mark.seed}: {escape(shown)} ({escape(mark.run_id)})"
        f"</title></circle>"
    )


def _legend(seeds: Sequence[int], y: float, left: float) -> str:
    parts, x = [], left
    for seed in seeds:
        parts.append(
            f'<circle cx="{x + 5:.1f}" cy="{y:.1f}" r="5" fill="{_colour(seed, seeds)}"/>'
            f'<text x="{x + 14:.1f}" y="{y + 4:.1f}" class="legend">seed {seed}</text>'
        )
        x += 24 + CHAR * len(f"seed {seed}")
    return "".join(parts)


def _frame(
    field: str,
    kind: str,
    rows: Sequence[str],
    body: str,
    left: float,
    seeds: Sequence[int],
    row_height: float,
) -> str:
    height = TOP + row_height * max(len(rows), 1) + BOTTOM
    labels = "".join(
        f'<text x="{left - 8:.1f}" y="{TOP + row_height * (i + 0.5) + 4:.1f}" text-anchor="end" '
        f'class="row-label">{escape(row)}</text>'
        for i, row in enumerate(rows)
    )
    return (
        f'<svg class="plot" data-field="{escape(field)}" data-kind="{kind}" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="{escape(field)} per run">'
        f"{_legend(seeds, 12, left)}{labels}{body}</svg>"
    )


def _strip_plot(field: str, marks: Sequence[Mark], seeds: Sequence[int]) -> str:
    rows = _rows(marks)
    left = _left(rows)
    crowded = max(sum(1 for mark in marks if mark.row == row) for row in rows)
    row_height = max(ROW, 11 * (crowded + 1))  # a row's marks, one above another, never overlap
    values = [_as_float(mark.value) for mark in marks]
    low, high, ticks = nice_axis(min(values), max(values))
    span = high - low
    plot_width = WIDTH - left - RIGHT

    def x_of(value: float) -> float:
        return left + (value - low) / span * plot_width

    bottom = TOP + row_height * len(rows)
    parts = [
        f'<line class="axis" x1="{left:.1f}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}"/>'
    ]
    for tick in ticks:
        x = x_of(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}"/>'
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">'
            f"{_number(tick)}</text>"
        )
    parts.append(
        f'<text x="{left + plot_width / 2:.1f}" y="{bottom + 36}" text-anchor="middle" '
        f'class="axis-label">{escape(field)}</text>'
    )
    for i, row in enumerate(rows):
        mine = [mark for mark in marks if mark.row == row]
        top = TOP + row_height * i
        numbers = sorted(_as_float(mark.value) for mark in mine)
        if len(numbers) >= 2:
            q1, median, q3 = statistics.quantiles(numbers, n=4, method="inclusive")
            middle = top + row_height / 2
            parts.append(
                f'<g class="box" data-row="{escape(row)}">'
                f'<line x1="{x_of(numbers[0]):.1f}" y1="{middle}" x2="{x_of(numbers[-1]):.1f}" '
                f'y2="{middle}"/><rect x="{x_of(q1):.1f}" y="{top + 6}" '
                f'width="{max(x_of(q3) - x_of(q1), 1):.1f}" height="{row_height - 12}"/>'
                f'<line class="median" x1="{x_of(median):.1f}" y1="{top + 4}" '
                f'x2="{x_of(median):.1f}" y2="{top + row_height - 4}"/></g>'
            )
        for j, mark in enumerate(mine):  # spread a row's marks over its height, in seed order
            y = top + row_height * (j + 1) / (len(mine) + 1)
            value = _as_float(mark.value)
            parts.append(_mark(x_of(value), y, mark, seeds, _number(value)))
    return _frame(field, "strip", rows, "".join(parts), left, seeds, row_height)


def _dot_plot(field: str, marks: Sequence[Mark], seeds: Sequence[int]) -> str:
    rows = _rows(marks)
    left = _left(rows)
    shown = [_category(mark.value) for mark in marks]
    categories = list(dict.fromkeys(shown))
    if len(categories) > MAX_CATEGORIES:  # the rarest values share one column
        common = sorted(categories, key=lambda c: (-shown.count(c), categories.index(c)))
        kept = set(common[: MAX_CATEGORIES - 1])
        shown = [value if value in kept else "other" for value in shown]
        categories = [c for c in categories if c in kept] + ["other"]
    column = (WIDTH - left - RIGHT) / max(len(categories), 1)
    bottom = TOP + ROW * len(rows)
    parts = [
        f'<line class="axis" x1="{left:.1f}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}"/>'
    ]
    for k, category in enumerate(categories):
        x = left + column * (k + 0.5)
        parts.append(
            f'<line class="grid" x1="{left + column * k:.1f}" y1="{TOP}" '
            f'x2="{left + column * k:.1f}" y2="{bottom}"/>'
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">'
            f"{escape(_clip(category, int(column / CHAR)))}</text>"
        )
    parts.append(
        f'<text x="{left + (WIDTH - left - RIGHT) / 2:.1f}" y="{bottom + 36}" '
        f'text-anchor="middle" class="axis-label">{escape(field)}</text>'
    )
    for i, row in enumerate(rows):
        for k, category in enumerate(categories):
            cell = [
                m
                for m, value in zip(marks, shown, strict=True)
                if m.row == row and value == category
            ]
            step = min(12.0, (column - 12) / max(len(cell), 1))
            start = left + column * (k + 0.5) - step * (len(cell) - 1) / 2
            for j, mark in enumerate(cell):
                parts.append(
                    _mark(start + step * j, TOP + ROW * i + ROW / 2, mark, seeds, category)
                )
    return _frame(field, "categories", rows, "".join(parts), left, seeds, ROW)


def nice_axis(low: float, high: float, *, ticks: int = 5) -> tuple[float, float, list[float]]:
    """An axis covering ``low``..``high`` with round tick values (1, 2 or 5 times a power of 10)."""
    pad = (high - low) * 0.04 or abs(low) * 0.5 or 1.0  # no mark sits on the frame
    low, high = low - pad, high + pad
    raw = (high - low) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.floor(low / step) * step
    last = math.ceil(high / step) * step
    count = round((last - first) / step)
    return first, last, [first + step * i for i in range(count + 1)]


def _as_float(value: object) -> float:
    assert isinstance(value, int | float)
    return float(value)


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _category(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _clip(text: str, limit: int) -> str:
    limit = max(limit, 3)
    return text if len(text) <= limit else text[: limit - 1] + "…"
