"""The suite page's HTML: the leaderboard, a plot per grader field, a row per run; inline CSS and
SVG, no script (``suite_page`` reads the folder and writes the files)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape
from importlib import resources
from typing import TYPE_CHECKING, Any

from controller.suites.definition import Slot
from controller.viewer.page import _LONE_SURROGATE
from controller.viewer.plots import Mark, field_plot, is_number

if TYPE_CHECKING:
    from controller.viewer.suite_page import RunView, SuiteDocument

VALUE_COLUMNS = {
    "bradley-terry": ("strength", ("wins", "losses", "ties")),
    "total score": ("total", ("games",)),
    "mean score": ("score", ("runs",)),
}


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';">
<title>{title}</title><style>{css}</style></head>
<body>
<header>
<h1>Suite <code id="suite-id">{suite}</code> <span class="badge {source_class}" id="rankings-source"
 data-source="{source}">rankings: {source}</span></h1>
<div class="facts">{facts}</div>
</header>
<main>
{alert}
<h2>Leaderboard</h2>
<p class="note">{method}</p>
{leaderboard}
<h2>Grader fields across runs and seeds</h2>
<p class="note">One mark per run (per seat for a field that gives each seat a number), coloured by
seed; a box spans the quartiles, its bar is the median, its line the range. Hover a mark for its
run.</p>
<div class="plots" id="plots">{plots}</div>
<h2>Runs</h2>
{runs}
</main>
</body></html>
"""


def render_suite_page(document: SuiteDocument, views: list[RunView], source: str) -> str:
    grader = document.grader
    result_field = str(grader.get("result", ""))
    bad = [view for view in views if view.verification["status"] in ("failed", "missing")]
    alert = ""
    if bad:
        alert = (
            f'<p class="alert" id="ledger-alert">{len(bad)} of {len(views)} runs\' ledgers fail '
            f"verification now ({', '.join(escape(str(v.entry.run_id)) for v in bad)}); the "
            f"leaderboard below is {escape(source)}: run <code>society suite verify</code>.</p>"
        )
    facts = "".join(
        f"<span>{name} <b>{escape(str(value))}</b></span>"
        for name, value in (
            ("matchups", document.matchups),
            ("competitors", ", ".join(document.competitors)),
            ("seeds", ", ".join(str(seed) for seed in document.seeds)),
            ("runs", len(views)),
            ("ranked", sum(1 for v in views if v.entry.status == "ranked")),
            ("grader", grader.get("name", "?")),
            ("result field", result_field),
        )
    )
    fields = _fields(views)
    page = _TEMPLATE.format(
        title=escape(f"suite {document.suite}"),
        css=resources.files("controller.viewer").joinpath("suite.css").read_text("utf-8"),
        suite=escape(document.suite),
        source=escape(source),
        source_class={"suite.json": "self", "recomputed": "matches"}.get(source, "differs"),
        facts=facts,
        alert=alert,
        method=escape(_method_note(document.method)),
        leaderboard=_leaderboard(document),
        plots="".join(_figure(document, views, field, result_field) for field in fields)
        or '<p class="note">No run has grader output to plot.</p>',
        runs=_runs_table(views, fields),
    )
    return _LONE_SURROGATE.sub("\ufffd", page)  # suite.json may hold one; UTF-8 cannot


def _method_note(method: dict[str, Any]) -> str:
    ranking = str(method.get("ranking", "?"))
    text = {
        "bradley-terry": "Bradley-Terry log-strengths (a tie is half a win each side)",
        "total score": "total payoff over every game against another competitor",
        "mean score": "mean score over seeds",
    }.get(ranking, ranking)
    bootstrap = method.get("bootstrap")
    if isinstance(bootstrap, dict) and "interval" in method:
        text += (
            f"; {float(method['interval']):.0%} interval from {bootstrap.get('samples')} "
            f"bootstrap resamples of the seeds; equal values share a rank"
        )
    if "selfPlay" in method:
        text += f"; self-play: {method['selfPlay']}"
    return text + "."


def _leaderboard(document: SuiteDocument) -> str:
    value, counts = VALUE_COLUMNS.get(str(document.method.get("ranking")), ("value", ()))
    places = int(document.method.get("decimals", 3))
    head = "".join(f"<th>{name}</th>" for name in ("rank", "competitor", value, "interval"))
    head += "".join(f"<th>{name}</th>" for name in counts)
    rows = []
    for row in document.rankings:
        interval = row.get("interval")
        if isinstance(interval, list) and len(interval) == 2 and all(map(is_number, interval)):
            shown = f"[{interval[0]:.{places}f}, {interval[1]:.{places}f}]"
        else:
            shown = escape(str(row.get("intervalNote", "n/a")))
        number = row.get(value)
        cells = [
            f'<td class="num">{escape(str(row.get("rank")))}</td>',
            f"<td>{escape(str(row.get('competitor')))}</td>",
            f'<td class="num">{number:.{places}f}</td>'
            if is_number(number)
            else f"<td>{escape(str(number))}</td>",
            f"<td>{shown}</td>",
            *(f'<td class="num">{escape(str(row.get(name, "")))}</td>' for name in counts),
        ]
        rows.append(
            f'<tr data-competitor="{escape(str(row.get("competitor")))}" '
            f'data-rank="{escape(str(row.get("rank")))}">{"".join(cells)}</tr>'
        )
    if not rows:
        rows.append(f'<tr><td colspan="{4 + len(counts)}">no ranked runs</td></tr>')
    return _table("leaderboard", head, rows)


def _fields(views: Iterable[RunView]) -> list[str]:
    names: dict[str, None] = {}
    for view in views:
        names.update(dict.fromkeys(view.entry.result or {}))
    return list(names)


def _figure(document: SuiteDocument, views: list[RunView], field: str, result_field: str) -> str:
    entries = [v.entry for v in views if v.entry.result is not None and field in v.entry.result]
    values = [entry.result[field] for entry in entries if entry.result is not None]
    per_seat = all(
        isinstance(value, dict) and value and all(map(is_number, value.values()))
        for value in values
    )
    marks = []
    for entry in entries:
        assert entry.result is not None
        value = entry.result[field]
        slot = Slot(tuple(entry.competitors), entry.seed)
        if per_seat:
            marks += [
                Mark(slot.competitor_of(str(seat)), points, str(entry.run_id), entry.seed)
                for seat, points in value.items()
            ]
        else:
            row = (
                entry.competitors[0]
                if len(entry.competitors) == 1
                else " vs ".join(entry.competitors)
            )
            marks.append(Mark(row, value, str(entry.run_id), entry.seed))
    missing = len(views) - len(entries)
    notes = ["the result field" if field == result_field else "grader field"]
    notes.append("per competitor, one mark per seat" if per_seat else "per matchup")
    if missing:
        notes.append(f"{missing} runs without this field have no mark")
    return (
        f'<figure data-field="{escape(field)}"><figcaption>{escape(field)} '
        f"<small>({escape('; '.join(notes))})</small></figcaption>"
        f"{field_plot(field, marks, document.seeds)}</figure>"
    )


def _runs_table(views: list[RunView], fields: list[str]) -> str:
    head = "".join(
        f"<th>{escape(name)}</th>"
        for name in ("matchup", "seed", "run", "suite status", "ledger", "outcome", *fields)
    )
    rows = []
    for view in views:
        entry = view.entry
        run = escape(str(entry.run_id or "no run"))
        link = f'<a class="replay" href="{escape(view.href)}">{run}</a>' if view.href else run
        status = f'<span class="badge {escape(entry.status)}">{escape(entry.status)}</span>'
        if entry.reason:
            status += f'<span class="reasons">{escape(entry.reason)}</span>'
        verification = view.verification
        ledger = (
            f'<span class="badge {escape(verification["status"])} verification" '
            f'data-status="{escape(verification["status"])}">{escape(verification["status"])}'
            f"</span>"
        )
        reasons = "; ".join(
            f"{r.get('reason')}: {r.get('detail')}" for r in verification.get("reasons", [])
        )
        if reasons:
            ledger += f'<span class="reasons">{escape(reasons[:400])}</span>'
        if view.outcome is None:
            outcome = "-"
        else:
            ok, text = view.outcome
            outcome = f'<span class="outcome {"ok" if ok else "bad"}">{escape(text)}</span>'
        result = entry.result or {}
        cells = [
            f"<td>{escape(' vs '.join(entry.competitors))}</td>",
            f'<td class="num">{entry.seed}</td>',
            f"<td>{link}</td>",
            f"<td>{status}</td>",
            f"<td>{ledger}</td>",
            f"<td>{outcome}</td>",
            *(
                f"<td>{escape(_shown(result[name])) if name in result else '-'}</td>"
                for name in fields
            ),
        ]
        rows.append(
            f'<tr class="run" data-run="{escape(str(entry.run_id))}" '
            f'data-slot="{escape(entry.slot)}">'
            f"{''.join(cells)}</tr>"
        )
    return _table("runs", head, rows)


def _table(table_id: str, head: str, rows: list[str]) -> str:
    return (
        f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)[:200]
