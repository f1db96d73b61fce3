"""Forks: ``society run MODULE --fork PARENT_RUN_DIR --at N``, bound to the parent and checked
against it message for message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from forks_support import EXAMPLES, Society

pytestmark = pytest.mark.slow

FORK = EXAMPLES / "partition_fork.py"
SHORT = ("--set", "deadline_s=3")


def run_started(run_dir: Path) -> dict[str, object]:
    first = (run_dir / "ledger" / "main" / "records.ndjson").read_text().splitlines()[0]
    event = json.loads(first)["event"]
    assert event["tag"] == "society.run-started/v1"
    return dict(event)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Society:
    """The parent's artifact root, shared by the module's tests (none of them writes to it but
    the first, whose fork the grader looks for beside its parent)."""
    return Society(tmp_path_factory.mktemp("parent") / "artifacts")


@pytest.fixture(scope="module")
def parent(home: Society) -> Path:
    return home.run_dir(home.run(EXAMPLES / "negotiation.py"))


def test_a_partition_at_message_4_shares_the_prefix_and_changes_the_outcome(
    home: Society, parent: Path
) -> None:
    society = home
    fork = society.run_dir(society.run(FORK, "--fork", parent, "--at", "4", *SHORT))

    started, parent_started = run_started(fork), run_started(parent)
    completion = json.loads((parent / "ledger" / "main" / "completion.json").read_text())
    assert started["fork"] == {
        "parentRunId": parent.name,
        "parentHeadDigest": completion["headDigest"],
        "at": 4,
    }
    assert started["seed"] == parent_started["seed"]
    assert started["parameters"] == {"partition": True, "deadline_s": 3.0}
    assert "fork" not in parent_started and "parameters" not in parent_started

    compared = society("ledger", "compare", fork, parent)
    assert compared.code == 0, compared.stdout + compared.stderr
    relation = compared.line()["fork"]
    assert relation["holds"] is True and relation["prefix"] == "shared"
    assert (relation["fork"], relation["parent"], relation["at"]) == (fork.name, parent.name, 4)
    assert relation["headDigest"] == "matches" and relation["sharedMessages"] == 4
    first = relation["firstDifference"]
    assert first["message"] == 5 and first["fork"]["sender"] == "agent:bob"
    assert first["fork"]["dropped"] == [["agent:alice", "link-down"]]
    assert first["parent"]["delivered"] == ["agent:alice", "endpoint:workload"]

    graded = society("grade", EXAMPLES / "graders" / "partition_fork.py", fork)
    assert graded.code == 0, graded.stderr
    grade = graded.line()
    assert grade["fork"] == {"parent": parent.name, "at": 4}
    assert grade["agreed"] is False and grade["parent"]["agreed"] is True
    assert grade["outcomeChanged"] is True and grade["dropped"] >= 1


def test_a_fork_without_its_intervention_agrees_with_its_parent_throughout(
    society: Society, parent: Path
) -> None:
    fork = society.run_dir(
        society.run(FORK, "--fork", parent, "--at", "2", "--set", "partition=false")
    )

    compared = society("ledger", "compare", parent, fork)

    assert compared.code == 0, compared.stdout
    line = compared.line()
    assert line["same"] is True and line["fork"]["holds"] is True
    assert line["fork"]["firstDifference"] is None and line["fork"]["sharedMessages"] == 7


def test_a_fork_checked_against_another_run_under_its_parents_id_does_not_hold(
    society: Society, parent: Path
) -> None:
    """The impostor is a real, verifying run of the same experiment that took the parent's run
    id (under another artifact root): only the parent's head digest tells them apart."""
    fork = society.run_dir(society.run(FORK, "--fork", parent, "--at", "4", *SHORT))
    elsewhere = Society(society.artifacts.parent / "elsewhere")
    impostor = elsewhere.run_dir(
        elsewhere.run(EXAMPLES / "negotiation.py", "--run-id", parent.name)
    )
    assert impostor.name == parent.name

    compared = society("ledger", "compare", fork, impostor)

    assert compared.code == 1, compared.stdout
    relation = compared.line()["fork"]
    assert relation["holds"] is False and relation["headDigest"] == "differs"
    assert relation["prefix"] == "shared"


def test_a_tampered_parent_is_refused_before_anything_runs(society: Society, parent: Path) -> None:
    tampered = society.artifacts / "tampered"
    shutil.copytree(parent, tampered)
    records = tampered / "ledger" / "main" / "records.ndjson"
    records.write_text(records.read_text().replace("split 60/40", "split 99/1"))

    ran = society.run(FORK, "--fork", tampered, "--at", "4", *SHORT)

    assert ran.code == 2 and ran.stdout == ""
    assert "does not verify" in ran.stderr and "society ledger verify" in ran.stderr
    assert not list(society.artifacts.glob("sr-*"))


@pytest.mark.parametrize(
    ("module", "at", "said"),
    [
        (EXAMPLES / "hello.py", "2", "acme.hello/v1"),
        (FORK, "8", "its router committed 7 messages"),
        (FORK, "-1", "pass --at between 0 and 7"),
    ],
)
def test_a_fork_of_another_experiment_or_past_the_parents_end_is_refused(
    society: Society, parent: Path, module: Path, at: str, said: str
) -> None:
    ran = society.run(module, "--fork", parent, "--at", at)

    assert ran.code == 2 and ran.stdout == "", ran.stderr
    assert said in ran.stderr
    assert not list(society.artifacts.glob("sr-*"))
