"""Replays and forks of a society where two agents answer at once are judged by causality: each
conversation's messages and each receiver's deliveries, not the order two commits raced in."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from forks_support import PROGRAMS, Society

from controller.viewer.compare import COMMITTED
from ledger import SigningKey

pytestmark = pytest.mark.slow

ROUNDS = PROGRAMS / "concurrent_rounds.py"
AT = 16  # after four rounds of four messages: the host waits for both replies before the next


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Society:
    return Society(tmp_path_factory.mktemp("concurrent") / "artifacts")


@pytest.fixture(scope="module")
def parent(home: Society) -> Path:
    return home.run_dir(home.run(ROUNDS))


@pytest.fixture(scope="module")
def fork(home: Society, parent: Path) -> Path:
    return home.run_dir(home.run(ROUNDS, "--fork", parent, "--at", str(AT)))


def commit_order(run_dir: Path) -> list[tuple[str, str]]:
    """Every committed message's (sender, text) in router-sequence order."""
    rows = [json.loads(line) for line in (run_dir / "ledger/main/records.ndjson").open()]
    events = [row["event"] for row in rows if row["event"]["tag"] == COMMITTED]
    ordered = sorted(events, key=lambda event: event["routerSequence"])
    return [(event["senderId"], event["parts"][0]) for event in ordered]


def tampered(parent: Path, into: Path, text: str, instead: str) -> Path:
    """A copy of ``parent`` with one committed message's text changed, re-chained and signed
    with a fresh key, as anyone can."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ledger"))
    from ledger_testkit import forge

    shutil.copytree(parent, into)

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        (row,) = [
            r for r in rows if r["event"]["tag"] == COMMITTED and r["event"]["parts"] == [text]
        ]
        row["event"]["parts"] = [instead]
        return rows

    forge(into / "ledger" / "main", SigningKey.generate(), records=change, set_public_key=True)
    return into


def test_a_fork_of_a_concurrent_society_holds_against_its_honest_parent(
    home: Society, parent: Path, fork: Path
) -> None:
    compared = home("ledger", "compare", fork, parent)

    assert compared.code == 0, compared.stdout + compared.stderr
    line = compared.line()
    relation = line["fork"]
    assert relation["holds"] is True and relation["prefix"] == "shared", relation
    assert relation["by"] == "conversation" and relation["headDigest"] == "matches"
    assert relation["prefixConversations"] == {"conversation 1": 8, "conversation 2": 8}
    assert relation["sharedMessages"] == 24 and relation["firstDifference"] is None
    assert line["same"] is True and line["messages"] == 24
    # both runs hold the same messages; the order they were committed in may differ
    assert sorted(commit_order(fork)) == sorted(commit_order(parent))


def test_a_parent_with_one_message_changed_and_re_signed_is_caught_where_it_changed(
    home: Society, parent: Path, fork: Path, tmp_path: Path
) -> None:
    forged = tampered(parent, tmp_path / parent.name, "bob heard round 2", "bob heard round 9")

    compared = home("ledger", "compare", fork, forged)

    assert compared.code == 1, compared.stdout + compared.stderr
    relation = compared.line()["fork"]
    assert relation["holds"] is False and relation["prefix"] == "differs"
    assert relation["sharedMessages"] == 12 + 3  # all of conversation 1; 2 up to bob's 2nd answer
    first = relation["firstDifference"]
    assert (first["conversation"], first["index"]) == ("conversation 2", 3), first
    assert first["parent"]["parts"] == ["bob heard round 9"]
    assert first["fork"]["parts"] == ["bob heard round 2"]
    assert first["parent"]["sender"] == first["fork"]["sender"] == "agent:bob"


def test_a_concurrent_society_replays_identically(home: Society, parent: Path) -> None:
    replay = home("replay", parent)

    assert replay.code == 0, replay.stdout + replay.stderr
    line = replay.line()
    assert line["replay"] == "identical", line.get("divergence")
    assert line["by"] == "conversation" and line["messages"] == 24
