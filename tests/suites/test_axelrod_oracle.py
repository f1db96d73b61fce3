"""An iterated prisoner's dilemma round-robin with self-play, played through the product by
scripted agents, agrees with the `axelrod` library move for move, payoff for payoff, and in its
total scores (axelrod's own tournament is the oracle)."""

from __future__ import annotations

import json
from typing import Any

import axelrod
import pytest
from suite_support import society

TURNS = 5
STRATEGIES = {
    "cooperator": axelrod.Cooperator,
    "defector": axelrod.Defector,
    "tit-for-tat": axelrod.TitForTat,
    "grudger": axelrod.Grudger,
}
SUITE = """
from typing import ClassVar

import anyio

from controller import Event, Rule, RunSpec, ScriptedPolicy, scripted
from controller.suites import Suite

TURNS = {turns}


class Moves(Event):
    tag: ClassVar[str] = "acme.ipd-moves/v1"
    moves: dict[str, list[str]]


def ask(seats, history):
    prompts = []
    for seat, other in ((seats[0], seats[1]), (seats[1], seats[0])):
        seen = history[other.name]
        last = seen[-1] if seen else "none"
        ever = "yes" if "D" in seen else "no"
        prompts.append(f"@{{seat.name}} move last={{last}} ever={{ever}}")
    return " ".join(prompts)


async def play(ctx):
    seats = [handle.agent for handle in ctx.agents.values()]
    history = {{seat.name: [] for seat in seats}}
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(*seats)
        stream = host.messages()
        for _ in range(TURNS):
            await conversation.send(ask(seats, history))
            turn = {{}}
            with anyio.fail_after(20.0):
                while len(turn) < len(seats):
                    message = await anext(stream)
                    if message.text in ("C", "D"):
                        turn.setdefault(message.sender.name, message.text)
            for name, move in turn.items():
                history[name].append(move)
    await ctx.events.emit(Moves(moves=history))


def say(match, move):
    return Rule(match=match, senders=("host",), texts=(move,))


RULES = {{
    "cooperator": (say(r"@{{me}} move", "C"),),
    "defector": (say(r"@{{me}} move", "D"),),
    "tit-for-tat": (say(r"@{{me}} move last=D", "D"), say(r"@{{me}} move", "C")),
    "grudger": (say(r"@{{me}} move last=\\w+ ever=yes", "D"), say(r"@{{me}} move", "C")),
}}


def build(competitors):
    agents = {{
        seat: scripted(ScriptedPolicy(rules=RULES[name])) for seat, name in competitors.items()
    }}
    return RunSpec.define(id="acme.ipd/v1", events=[Moves], agents=agents, execute=play)


suite = Suite.define(
    id="ipd-v1", competitors={{name: name for name in RULES}}, build=build,
    matchups="round-robin", self_play=True, ranking="score", seeds=[1],
    grader="ipd_grader.py", result="payoff",
)
"""
GRADER = """
from ipd_suite import Moves, build

catalog = build({"cooperator": "cooperator", "defector": "defector"}).catalog
definition_id = "acme.ipd/v1"
PAYOFF = {("C", "C"): (3, 3), ("C", "D"): (0, 5), ("D", "C"): (5, 0), ("D", "D"): (1, 1)}


def grade(ledger):
    (event,) = ledger.events(Moves)
    (first, mine), (second, theirs) = event.moves.items()
    points = [PAYOFF[pair] for pair in zip(mine, theirs, strict=True)]
    return {
        "payoff": {first: sum(a for a, _ in points), second: sum(b for _, b in points)},
        "moves": event.moves,
    }
"""


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    here = tmp_path_factory.mktemp("ipd")
    (here / "ipd_suite.py").write_text(SUITE.format(turns=TURNS))
    (here / "ipd_grader.py").write_text(GRADER)
    artifacts = here / "runs"
    done = society("suite", "run", str(here / "ipd_suite.py"), "--artifacts", str(artifacts))
    assert done.returncode == 0, done.stderr[-3000:]
    document: dict[str, Any] = json.loads((artifacts / "ipd-v1" / "suite.json").read_text())
    assert document["reported"] == [], document["reported"]
    return document


def _axelrod_match(first: str, second: str) -> list[tuple[str, str]]:
    match = axelrod.Match((STRATEGIES[first](), STRATEGIES[second]()), turns=TURNS)
    return [(str(a), str(b)) for a, b in match.play()]


def test_every_game_matches_axelrods_match_move_for_move(played: dict[str, Any]) -> None:
    assert len(played["runs"]) == 10  # 6 unordered pairs and 4 twins, not 12 ordered pairs
    for run in played["runs"]:
        first, second = run["competitors"]
        seats = list(run["result"]["moves"])
        ours = list(zip(*(run["result"]["moves"][seat] for seat in seats), strict=True))
        assert ours == _axelrod_match(first, second), run["slot"]


def test_totals_and_shared_ranks_match_axelrods_tournament_scores(played: dict[str, Any]) -> None:
    names = list(STRATEGIES)
    tournament = axelrod.Tournament(
        [STRATEGIES[name]() for name in names], turns=TURNS, repetitions=1, seed=1
    )
    results = tournament.play(progress_bar=False, processes=1)
    oracle = {name: float(results.scores[i][0]) for i, name in enumerate(names)}
    ours = {row["competitor"]: row["total"] for row in played["rankings"]}
    assert ours == oracle
    for i, name in enumerate(names):  # the diagonal: each competitor against its twin
        twin = next(r for r in played["runs"] if r["competitors"] == [name, name])
        mean = sum(twin["result"]["payoff"].values()) / 2
        assert mean == pytest.approx(float(results.payoff_matrix[i][i]) * TURNS)
    for row in played["rankings"]:
        assert row["rank"] == 1 + sum(1 for total in oracle.values() if total > row["total"])
