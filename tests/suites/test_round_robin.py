"""Tournaments as researchers run them: an unordered round-robin with self-play (each pair once,
each competitor against its twin), ranked by total payoff, equal totals sharing a rank, and a note
where one seed leaves no interval to estimate — played for real as a one-shot prisoner's dilemma."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suite_support import society

from controller.suites import Suite, load_suite
from controller.suites.definition import Slot, SuiteError
from controller.suites.evidence import RunEvidence
from controller.suites.ratings import NO_INTERVAL, Game, rate, shared_ranks
from controller.suites.report import _rankings

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
    return RunSpec.define(id="acme.pd/v1", events=[Moves], agents=agents, execute=play)


suite = Suite.define(
    id="pd-v1", competitors={"dove": "C", "hawk": "D", "falcon": "D"}, build=build,
    matchups="round-robin", self_play=True, ranking="score", seeds=[1],
    grader="pd_grader.py", result="payoff",
)
"""
GRADER = """
from pd_suite import Moves, build

catalog = build({"a": "C", "b": "D"}).catalog
definition_id = "acme.pd/v1"
PAYOFF = {("C", "C"): (3, 3), ("C", "D"): (0, 5), ("D", "C"): (5, 0), ("D", "D"): (1, 1)}


def grade(ledger):
    (event,) = ledger.events(Moves)
    (first, a), (second, b) = event.moves.items()
    mine, theirs = PAYOFF[(a, b)]
    return {"payoff": {first: mine, second: theirs}}
"""


@pytest.fixture(scope="module")
def tournament(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    here = tmp_path_factory.mktemp("round-robin")
    (here / "pd_suite.py").write_text(SUITE)
    (here / "pd_grader.py").write_text(GRADER)
    done = society("suite", "run", str(here / "pd_suite.py"), "--artifacts", str(here / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    return here / "pd_suite.py", here / "runs" / "pd-v1"


def test_a_round_robin_with_self_play_plays_each_unordered_pair_and_each_twin_once(
    tournament: tuple[Path, Path],
) -> None:
    document = json.loads((tournament[1] / "suite.json").read_text())
    played = [tuple(run["competitors"]) for run in document["runs"]]
    assert played == [
        ("dove", "dove"), ("dove", "hawk"), ("dove", "falcon"),
        ("hawk", "hawk"), ("hawk", "falcon"), ("falcon", "falcon"),
    ]  # fmt: skip
    assert document["reported"] == [], document["reported"]
    twin = next(run for run in document["runs"] if run["competitors"] == ["hawk", "hawk"])
    assert twin["result"] == {"payoff": {"hawk": 1, "hawk-twin": 1}}


def test_the_tournament_ranks_by_total_payoff_with_shared_ranks_and_an_interval_note(
    tournament: tuple[Path, Path],
) -> None:
    document = json.loads((tournament[1] / "suite.json").read_text())
    rows = [(r["rank"], r["competitor"], r["total"], r["games"]) for r in document["rankings"]]
    # Self-play is played and reported (above), not counted: as the axelrod library scores it.
    assert rows == [(1, "falcon", 6.0, 2), (1, "hawk", 6.0, 2), (3, "dove", 0.0, 2)]
    assert all(
        r["interval"] is None and r["intervalNote"] == NO_INTERVAL for r in document["rankings"]
    )
    assert document["method"]["ranking"] == "total score" and document["method"]["selfPlay"]
    board = (tournament[1] / "leaderboard.md").read_text()
    assert "| 1 | falcon | 6.000 | n/a (one seed) | 2 |" in board
    assert "| 1 | hawk | 6.000 |" in board and f"Note: {NO_INTERVAL}." in board


def test_the_tournament_recomputes_byte_for_byte(tournament: tuple[Path, Path]) -> None:
    module, folder = tournament
    verified = society("suite", "verify", str(folder), "--suite", str(module))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["ranked"] == 6


def test_equal_bradley_terry_strengths_share_a_rank_and_one_seed_says_so() -> None:
    games = [
        Game("ann", "bob", 1, None),
        Game("bob", "cid", 1, "bob"),
        Game("ann", "cid", 1, "ann"),
    ]
    ratings = rate(["ann", "bob", "cid"], games)
    assert [r.name for r in ratings] == ["ann", "bob", "cid"]
    assert shared_ranks([r.strength for r in ratings]) == [1, 1, 3]
    suite = load_suite(Path(__file__).parent.parent.parent / "examples" / "negotiation_suite.py")
    runs = [
        RunEvidence(Slot((g.first, g.second), 1), "sr-x", "ranked", value=g.winner) for g in games
    ]
    bare = Suite.define(
        id="bt", competitors={"ann": 1, "bob": 2, "cid": 3}, build=suite.build,
        matchups="pairs", seeds=[1], grader="g.py", result="winner",
    )  # fmt: skip
    rows = _rankings(bare, runs)
    assert [(row["rank"], row["competitor"]) for row in rows] == [
        (1, "ann"),
        (1, "bob"),
        (3, "cid"),
    ]
    assert all(row["interval"] is None and row["intervalNote"] == NO_INTERVAL for row in rows)


def test_self_play_and_score_ranking_are_checked_when_the_suite_is_defined() -> None:
    common = {"competitors": {"a": 1, "b": 2}, "build": lambda c: None, "seeds": [1]}
    with pytest.raises(SuiteError) as refused:
        Suite.define(id="x", matchups="pairs", self_play=True, grader="g.py", result="r", **common)  # type: ignore[arg-type]
    assert refused.value.reason == "bad-self-play"
    with pytest.raises(SuiteError) as refused:
        Suite.define(
            id="x", matchups="single", ranking="score", grader="g.py", result="r", **common
        )  # type: ignore[arg-type]
    assert refused.value.reason == "bad-ranking"
    robin = Suite.define(id="x", matchups="round-robin", grader="g.py", result="r", **common)  # type: ignore[arg-type]
    assert [slot.competitors for slot in robin.slots()] == [("a", "b")]
