"""The suite page: ``society view SUITE_DIR``, one self-contained HTML file with a replay page per
run beside it (``<page stem>-runs/<run id>.html``).

The leaderboard is the suite's own: ``suite.json`` as ``society suite run`` wrote it, or, given
the suite module, ``controller.suites.report.compute`` run again over the folder's ledgers (the
code ``suite run`` and ``suite verify`` use). Every run's ledger is verified again here; one that
fails is shown with its reason, and its replay page shows it as found. The folder is data: nothing
it names is imported, and only run ids of the form ``sr-<32 hex>`` become paths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.run.runid import RUN_ID_PATTERN
from controller.suites.definition import SuiteError
from controller.suites.layout import JOURNAL, PLAN, SUITE_JSON, SuiteFolder, write_atomically
from controller.viewer.page import render_page
from controller.viewer.records import RunLedger, read_run
from controller.viewer.suite_html import render_suite_page
from ledger import LedgerError

OUTCOMES = {
    "society.program-succeeded": (True, "program succeeded"),
    "society.program-failed": (False, "program failed"),
    "society.program-interrupted": (False, "interrupted"),
    "society.platform-failed": (False, "platform failed"),
}
"""By tag without its version: a ledger of any version of these events has an outcome."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class SuiteRunEntry(_Frozen):
    """One run of ``suite.json`` (the fields the page shows)."""

    slot: str
    competitors: list[str]
    seed: int
    run_id: str | None = Field(default=None, alias="runId")
    status: str
    reason: str | None = None
    detail: str | None = None
    result: dict[str, Any] | None = None


class SuiteDocument(_Frozen):
    """``suite.json``: checked here before anything of it is shown."""

    suite: str
    matchups: str
    competitors: list[str]
    seeds: list[int]
    grader: dict[str, Any]
    method: dict[str, Any]
    rankings: list[dict[str, Any]]
    runs: list[SuiteRunEntry]


@dataclass(frozen=True, slots=True)
class RunView:
    entry: SuiteRunEntry
    href: str | None
    """The run's replay page, relative to the suite page; ``None`` when there is no ledger."""
    verification: dict[str, Any]
    outcome: tuple[bool, str] | None


@dataclass(frozen=True, slots=True)
class SuitePageWritten:
    page: Path
    suite: str
    runs: int
    replays: int
    verification: dict[str, int]
    """How many runs' ledgers came out ``pinned``, ``self``, ``failed``, ``missing``..."""
    rankings: str
    """``suite.json`` or ``recomputed``."""

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.verification.items() if status in ("failed", "missing"))

    def as_json(self) -> dict[str, Any]:
        return {
            "written": str(self.page),
            "suite": self.suite,
            "runs": self.runs,
            "replays": self.replays,
            "verification": self.verification,
            "rankings": self.rankings,
            "bytes": self.page.stat().st_size,
        }


def is_suite_folder(path: Path) -> bool:
    """A folder ``society suite run`` made: ``runs/`` beside its plan, journal or suite.json."""
    return (path / "runs").is_dir() and any(
        (path / name).is_file() for name in (SUITE_JSON, PLAN, JOURNAL)
    )


def read_suite_document(folder: SuiteFolder) -> SuiteDocument:
    try:
        written = json.loads(folder.suite_json.read_bytes())
    except (OSError, ValueError) as exc:
        raise SuiteError(
            f"{folder.root} holds no readable {SUITE_JSON} ({exc}); run `society suite run` to "
            f"completion first",
            reason="suite-files-missing",
        ) from None
    try:
        return SuiteDocument.model_validate(written)
    except ValidationError as exc:
        raise SuiteError(
            f"{folder.suite_json} is not a suite.json this viewer reads: "
            f"{exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}",
            reason="suite-json-invalid",
        ) from None


def recompute_document(folder: SuiteFolder, module: Path) -> dict[str, Any]:
    """``suite.json``'s document recomputed from the ledgers by the suite's own ``compute``."""
    from controller.suites.definition import load_suite
    from controller.suites.layout import Journal
    from controller.suites.report import compute

    suite = load_suite(module)
    if suite.id != folder.root.name:
        raise SuiteError(
            f"{folder.root} is not the folder of suite {suite.id!r} (pass DIR/{suite.id})",
            reason="suite-mismatch",
        )
    return compute(suite, folder, Journal.read(folder)).document


def write_suite_page(
    directory: Path,
    output: Path,
    *,
    trusted_key: str | None = None,
    module: Path | None = None,
) -> SuitePageWritten:
    """Write each run's replay page beside ``output``, then the suite page itself."""
    folder = SuiteFolder(directory.resolve())
    written = read_suite_document(folder)
    if module is None:
        document, source = written, "suite.json"
    else:
        document = SuiteDocument.model_validate(recompute_document(folder, module))
        agrees = document.rankings == written.rankings and document.runs == written.runs
        source = "recomputed" if agrees else "recomputed, differs from suite.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    replays = output.parent / f"{output.stem}-runs"
    views = []
    for entry in document.runs:
        views.append(_run_view(folder, entry, replays, output.stem, trusted_key))
    counts: dict[str, int] = {}
    for view in views:
        counts[view.verification["status"]] = counts.get(view.verification["status"], 0) + 1
    write_atomically(output, render_suite_page(document, views, source))
    return SuitePageWritten(
        output,
        document.suite,
        len(views),
        sum(1 for view in views if view.href is not None),
        dict(sorted(counts.items())),
        "suite.json" if module is None else "recomputed",
    )


def _run_view(
    folder: SuiteFolder,
    entry: SuiteRunEntry,
    replays: Path,
    stem: str,
    trusted_key: str | None,
) -> RunView:
    run_id = entry.run_id
    if run_id is None:
        return RunView(entry, None, {"status": "not-run", "reasons": []}, None)
    if RUN_ID_PATTERN.match(run_id) is None:  # suite.json is data: it names no path
        reasons = [{"reason": "run-id-invalid", "detail": f"{run_id[:80]!r} is not sr-<32 hex>"}]
        return RunView(entry, None, {"status": "missing", "reasons": reasons}, None)
    try:
        run = read_run(folder.runs / run_id, trusted_key=trusted_key)
    except LedgerError as exc:
        reasons = [{"reason": exc.reason, "detail": exc.detail}]
        return RunView(entry, None, {"status": "missing", "reasons": reasons}, None)
    replays.mkdir(parents=True, exist_ok=True)
    write_atomically(replays / f"{run_id}.html", render_page(run))
    href = f"{quote(stem)}-runs/{run_id}.html"
    return RunView(entry, href, run.verification, _outcome(run))


def _outcome(run: RunLedger) -> tuple[bool, str] | None:
    found = None
    for row in run.records.rows:
        outcome = OUTCOMES.get(run.records.tags[row[3]].rpartition("/")[0])
        if outcome is not None:
            ok, text = outcome
            reason = row[4].get("reason") if isinstance(row[4], dict) else None
            found = (ok, text if ok or not reason else f"{text}: {reason}")
    return found
