"""The suite page of a real suite (two scripted competitors in both seatings on two seeds), opened
from disk in Chromium: the suite's own leaderboard, a row per run linking to its replay page, a
plot per grader field with a mark per run, no network; a tampered ledger is shown, not fatal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from viewer_support import society

from ledger.format import RECORDS

SUITE = """
from typing import ClassVar

import anyio

from controller import Event, Rule, RunSpec, ScriptedPolicy, scripted
from controller.suites import Suite


class Moves(Event):
    tag: ClassVar[str] = "acme.pd-moves/v1"
    moves: dict[str, str]


async def play(ctx):
    seats = [handle.agent for handle in ctx.agents.values()]
    moves = {}
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(*seats)
        await conversation.send(" ".join(f"@{seat.name} move" for seat in seats))
        with anyio.move_on_after(20.0):
            async for message in host.messages():
                if message.text in ("C", "D"):
                    moves[message.sender.name] = message.text
                if len(moves) == len(seats):
                    break
    await ctx.events.emit(Moves(moves=moves))


def player(move):
    return scripted(ScriptedPolicy(rules=(
        Rule(match=r"@{me} move", senders=("host",), texts=(move,), limit=1),
    )))


def build(competitors):
    agents = {seat: player(move) for seat, move in competitors.items()}
    return RunSpec.define(id="acme.pd-pairs/v1", events=[Moves], agents=agents, execute=play)


suite = Suite.define(
    id="pd-pairs-v1", competitors={"dove": "C", "hawk": "D"}, build=build,
    matchups="pairs", seeds=[1, 2], grader="pd_pairs_grader.py", result="winner",
)
"""
GRADER = """
from controller.events.run import RunStarted
from pd_pairs import Moves, build

catalog = build({"a": "C", "b": "D"}).catalog
definition_id = "acme.pd-pairs/v1"
PAYOFF = {("C", "C"): (3, 3), ("C", "D"): (0, 5), ("D", "C"): (5, 0), ("D", "D"): (1, 1)}


def grade(ledger):
    (event,) = ledger.events(Moves)
    (first, a), (second, b) = event.moves.items()
    mine, theirs = PAYOFF[(a, b)]
    (started,) = ledger.events(RunStarted)
    winner = first if mine > theirs else second if theirs > mine else "tie"
    return {
        "winner": winner,
        "payoff": {first: mine, second: theirs},
        "points": mine + theirs + started.seed,
        "cooperated": "C" in (a, b),
    }
"""
FIELDS = ["winner", "payoff", "points", "cooperated"]


@pytest.fixture(scope="module")
def suite_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of a 2-competitor pairs suite on 2 seeds: 4 runs of scripted agents."""
    here = tmp_path_factory.mktemp("suite-page")
    (here / "pd_pairs.py").write_text(SUITE)
    (here / "pd_pairs_grader.py").write_text(GRADER)
    done = society("suite", "run", str(here / "pd_pairs.py"), "--artifacts", str(here / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    return here / "runs" / "pd-pairs-v1"


def _view(folder: Path, output: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = society("view", str(folder), "-o", str(output), *extra)
    assert result.stdout.strip(), result.stderr[-3000:]
    document: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, document


@pytest.fixture(scope="module")
def suite_page(suite_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("suite-page-out") / "suite.html"
    code, written = _view(suite_folder, output)
    assert code == 0, written
    assert written["runs"] == written["replays"] == 4
    assert written["verification"] == {"self": 4}
    return output


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str]]:
    """The page from disk; any request that is not for a local file is recorded and refused."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    outside: list[str] = []

    def refuse(route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", refuse)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    page.wait_for_selector("#leaderboard")
    assert errors == []
    return page, outside


def _suite_json(folder: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((folder / "suite.json").read_text())
    return document


def test_the_suite_page_ranks_as_the_suite_did_and_links_every_run_to_its_replay(
    browser: Any, suite_folder: Path, suite_page: Path
) -> None:
    document = _suite_json(suite_folder)
    page, outside = _open(browser, suite_page)
    shown = page.locator("#leaderboard tbody tr").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.rank), r.dataset.competitor])"
    )
    assert shown == [[row["rank"], row["competitor"]] for row in document["rankings"]]
    assert shown == [[1, "hawk"], [2, "dove"]]  # hawk defects against a cooperator: it wins
    assert page.locator("#rankings-source").get_attribute("data-source") == "suite.json"

    rows = page.locator("#runs tr.run")
    assert rows.count() == len(document["runs"]) == 4
    links = page.locator("#runs a.replay").evaluate_all(
        "links => links.map(a => [a.closest('tr').dataset.run, a.getAttribute('href'), a.href])"
    )
    assert sorted(run_id for run_id, _, _ in links) == sorted(r["runId"] for r in document["runs"])
    for run_id, href, absolute in links:
        assert (suite_page.parent / href).is_file(), href
        replay = browser.new_page()
        replay.goto(absolute)
        replay.wait_for_selector("#verification[data-status]")
        assert replay.locator("#run-id").inner_text() == run_id
        assert replay.locator("#verification").get_attribute("data-status") == "self"
        replay.close()
    for run in document["runs"]:
        row = page.locator(f'#runs tr.run[data-run="{run["runId"]}"]')
        text = row.inner_text()
        assert " vs ".join(run["competitors"]) in text and "program succeeded" in text
        assert row.locator(".verification").get_attribute("data-status") == "self"
        assert run["result"]["winner"] in text
    page.screenshot(path=str(suite_page.parent / "suite.png"), full_page=True)
    assert outside == []
    page.close()


def test_each_grader_field_has_one_plot_with_a_mark_for_every_run(
    browser: Any, suite_folder: Path, suite_page: Path
) -> None:
    document = _suite_json(suite_folder)
    run_ids = sorted(run["runId"] for run in document["runs"])
    page, outside = _open(browser, suite_page)
    plots = page.locator("svg.plot")
    assert plots.evaluate_all("svgs => svgs.map(s => s.dataset.field)") == FIELDS
    for field in FIELDS:
        svg = page.locator(f'svg.plot[data-field="{field}"]')
        marks = svg.locator("circle.mark").evaluate_all(
            "marks => marks.map(m => [m.dataset.run, m.dataset.value])"
        )
        seats = 2 if field == "payoff" else 1  # a value per seat: a mark per seat
        assert sorted(run for run, _ in marks) == sorted(run_ids * seats), field
        expected = sorted(
            str(value).lower()
            for run in document["runs"]
            for value in (run["result"][field].values() if seats == 2 else [run["result"][field]])
        )
        assert sorted(value for _, value in marks) == expected, field
        assert field in svg.locator("text.axis-label").text_content()
        box = svg.bounding_box()
        assert box is not None and box["width"] >= 600 and box["height"] >= 100
    strip = page.locator('svg.plot[data-field="points"]')
    assert strip.get_attribute("data-kind") == "strip"
    assert strip.locator("g.box").count() == 2  # one per matchup: dove vs hawk, hawk vs dove
    ticks = strip.locator("text.tick").all_text_contents()
    assert "6" in ticks and "7" in ticks
    rows = page.locator('svg.plot[data-field="payoff"] text.row-label').all_text_contents()
    assert sorted(rows) == ["dove", "hawk"]  # a seat's payoff belongs to its competitor
    assert page.locator('svg.plot[data-field="winner"]').get_attribute("data-kind") == "categories"
    assert outside == []
    page.close()


def test_a_run_whose_ledger_fails_verification_is_badged_and_the_page_still_written(
    browser: Any, suite_folder: Path, tmp_path: Path
) -> None:
    folder = tmp_path / suite_folder.name
    shutil.copytree(suite_folder, folder)
    victim = _suite_json(folder)["runs"][1]["runId"]
    records = folder / "runs" / victim / "ledger" / "main" / RECORDS
    records.write_text(records.read_text().replace("@dove move", "@dove moves", 1))
    output = tmp_path / "out" / "suite.html"
    code, written = _view(folder, output)
    assert code == 1  # written, and says a ledger failed
    assert written["verification"] == {"failed": 1, "self": 3}
    page, outside = _open(browser, output)
    badge = page.locator(f'#runs tr.run[data-run="{victim}"] .verification')
    assert badge.get_attribute("data-status") == "failed"
    assert "chain-broken" in page.locator(f'#runs tr.run[data-run="{victim}"]').inner_text()
    assert victim in page.locator("#ledger-alert").inner_text()
    others = page.locator('#runs .verification[data-status="self"]')
    assert others.count() == 3
    href = page.locator(f'#runs tr.run[data-run="{victim}"] a.replay').get_attribute("href")
    replay = browser.new_page()
    replay.goto((output.parent / href).as_uri())
    replay.wait_for_selector("#verification[data-status]")
    assert replay.locator("#verification").get_attribute("data-status") == "failed"
    replay.close()
    assert outside == []
    page.close()


def test_with_the_suite_module_the_rankings_are_recomputed_from_the_ledgers(
    browser: Any, suite_folder: Path, tmp_path: Path
) -> None:
    output = tmp_path / "board.html"
    module = suite_folder.parents[1] / "pd_pairs.py"
    code, written = _view(suite_folder, output, "--suite", str(module))
    assert code == 0 and written["rankings"] == "recomputed"
    assert sorted(path.name for path in (tmp_path / "board-runs").iterdir()) == sorted(
        f"{run['runId']}.html" for run in _suite_json(suite_folder)["runs"]
    )
    page, _ = _open(browser, output)
    assert page.locator("#rankings-source").get_attribute("data-source") == "recomputed"
    shown = page.locator("#leaderboard tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.competitor)"
    )
    assert shown == [row["competitor"] for row in _suite_json(suite_folder)["rankings"]]
    page.close()


def test_a_folder_that_is_not_a_finished_suite_writes_nothing_and_says_why(
    suite_folder: Path, tmp_path: Path
) -> None:
    folder = tmp_path / suite_folder.name
    shutil.copytree(suite_folder, folder)
    (folder / "suite.json").unlink()
    output = tmp_path / "suite.html"
    code, written = _view(folder, output)
    assert code == 1 and written["reason"] == "suite-files-missing"
    assert not output.exists()
