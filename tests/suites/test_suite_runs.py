"""The example suite for real: interrupted and resumed, ranked, then verified byte for byte and
attacked (edited results, an edited ledger, a relabelled run) — every attack must be caught."""

from __future__ import annotations

import json
from pathlib import Path

from suite_support import EXAMPLE, SuiteFixture, copy_suite, society

from controller.suites import load_suite
from controller.suites.layout import Journal, SuiteFolder
from controller.suites.report import SuiteReport, compute
from ledger.format import RECORDS


def test_an_interrupted_suite_resumes_keeping_completed_verified_runs(
    example_suite: SuiteFixture,
) -> None:
    assert example_suite.interrupted_rc == 130
    assert example_suite.interrupted_line["state"] == "interrupted"
    ends = {e["runId"]: e["exit"] for e in example_suite.before_resume if "seconds" in e}
    started = {e["runId"] for e in example_suite.before_resume if "seconds" not in e}
    assert set(ends) == started and sum(code == 0 for code in ends.values()) >= 2
    # A run cut short finalized its ledger (if it had one yet): interrupted, it runs again; a
    # run whose program had already finished when the SIGINT came (teardown) left a complete,
    # verified ledger of a finished program: that one is kept even though it exited 130.
    complete: set[str] = set()
    for run_id, code in ends.items():
        ledger = example_suite.folder / "runs" / run_id / "ledger" / "main"
        if not (ledger / RECORDS).exists():
            assert code != 0  # SIGINT before `society run` created anything
            continue
        assert (ledger / "completion.json").exists()
        tags = [json.loads(line)["event"]["tag"] for line in (ledger / RECORDS).open()]
        if "society.program-interrupted/v1" in tags:
            assert code != 0
        else:
            assert "society.program-succeeded/v2" in tags
            complete.add(run_id)
    assert {run_id for run_id, code in ends.items() if code == 0} <= complete
    assert example_suite.resumed["kept"] == len(complete)
    assert example_suite.resumed["ran"] == 30 - len(complete)
    document = json.loads((example_suite.folder / "suite.json").read_text())
    kept_ids = {run["runId"] for run in document["runs"]}
    assert kept_ids & started == complete


def test_the_example_suite_ranks_every_run_and_the_hardliner_first(
    example_suite: SuiteFixture,
) -> None:
    assert example_suite.resumed["ranked"] == 30
    document = json.loads((example_suite.folder / "suite.json").read_text())
    assert [row["competitor"] for row in document["rankings"]] == ["hardliner", "fair", "yielder"]
    top = document["rankings"][0]
    assert (top["wins"], top["losses"], top["ties"]) == (10, 0, 10)
    assert document["reported"] == []
    run = document["runs"][0]
    assert run["ledgerDigest"] == run["receipt"]["headDigest"]
    assert run["receipt"]["signature"] == "self" and run["usage"] is None
    assert set(document["timing"]["runs"]) == {run["slot"] for run in document["runs"]}
    assert "seconds" not in json.dumps({k: v for k, v in document.items() if k != "timing"})
    board = (example_suite.folder / "leaderboard.md").read_text()
    assert "| 1 | hardliner |" in board and "None: every run verified" in board


def test_suite_verify_recomputes_both_files_byte_for_byte(example_suite: SuiteFixture) -> None:
    verified = society("suite", "verify", str(example_suite.folder), "--suite", str(EXAMPLE))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout) == {
        "valid": True,
        "suite": "negotiation-v1",
        "runs": 30,
        "ranked": 30,
        "differences": [],
    }


def _verify(folder: Path) -> dict[str, object]:
    result = society("suite", "verify", str(folder), "--suite", str(EXAMPLE))
    document: dict[str, object] = json.loads(result.stdout)
    assert result.returncode == (0 if document["valid"] else 1)
    return document


def test_an_edited_result_in_suite_json_is_caught(
    example_suite: SuiteFixture, tmp_path: Path
) -> None:
    folder = copy_suite(example_suite, tmp_path)
    document = json.loads((folder / "suite.json").read_text())
    slot = document["runs"][7]["slot"]
    document["runs"][7]["result"]["winner"] = "yielder"
    (folder / "suite.json").write_text(json.dumps(document, indent=2) + "\n")
    outcome = _verify(folder)
    assert outcome["valid"] is False
    assert f"suite.json: runs[{slot}] result recomputed differently" in outcome["differences"]


def test_an_edited_leaderboard_is_caught_and_timing_alone_may_differ(
    example_suite: SuiteFixture, tmp_path: Path
) -> None:
    folder = copy_suite(example_suite, tmp_path)
    document = json.loads((folder / "suite.json").read_text())
    document["timing"]["invocationSeconds"] = 0.001
    (folder / "suite.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    assert _verify(folder)["valid"] is True
    board = folder / "leaderboard.md"
    board.write_text(board.read_text().replace("| 1 | hardliner |", "| 1 | yielder |"))
    assert _verify(folder)["differences"] == [
        "leaderboard.md: differs from the recomputed leaderboard"
    ]


def test_an_edited_ledger_is_unverified_not_ranked_and_verify_fails(
    example_suite: SuiteFixture, tmp_path: Path
) -> None:
    folder = copy_suite(example_suite, tmp_path)
    document = json.loads((folder / "suite.json").read_text())
    target = next(run for run in document["runs"] if run["result"]["winner"] == "hardliner")
    records = folder / "runs" / target["runId"] / "ledger" / "main" / RECORDS
    records.write_text(records.read_text().replace('"hardliner":70', '"hardliner":30'))
    outcome = _verify(folder)
    assert outcome["valid"] is False and outcome["ranked"] == 29
    report = _recompute(folder)
    tampered = next(run for run in report.runs if run.run_id == target["runId"])
    assert tampered.status == "unverified" and tampered.reason == "chain-broken"
    assert {
        "slot": target["slot"],
        "runId": target["runId"],
        "status": "unverified",
        "reason": "chain-broken",
    } in report.document["reported"]
    assert sum(r["wins"] for r in report.document["rankings"]) == 9


def test_a_run_relabelled_as_another_matchup_is_caught(
    example_suite: SuiteFixture, tmp_path: Path
) -> None:
    folder = copy_suite(example_suite, tmp_path)
    journal = Journal.read(SuiteFolder(folder))
    first, second = "hardliner.yielder/seed-1", "yielder.hardliner/seed-1"
    with (folder / "attempts.jsonl").open("a") as handle:  # the attacker swaps two runs' slots
        handle.write(json.dumps({"slot": first, "runId": journal.latest[second]}) + "\n")
        handle.write(json.dumps({"slot": second, "runId": journal.latest[first]}) + "\n")
    report = _recompute(folder)
    reasons = {run.slot.key: run.reason for run in report.runs if run.status != "ranked"}
    assert reasons == {first: "slot-mismatch", second: "slot-mismatch"}
    assert _verify(folder)["valid"] is False


def _recompute(folder: Path) -> SuiteReport:
    suite_folder = SuiteFolder(folder)
    suite = load_suite(EXAMPLE)
    return compute(suite, suite_folder, Journal.read(suite_folder))


def test_a_generated_matchup_module_runs_by_hand_with_the_include_its_error_names(
    example_suite: SuiteFixture, tmp_path: Path
) -> None:
    matchup = sorted((example_suite.folder / "matchups").glob("*.py"))[0]
    told = f"society run {matchup} --include {EXAMPLE.parent}"
    assert f"#   {told}\n" in matchup.read_text()
    refused = society("run", str(matchup), "--artifacts", str(tmp_path / "a"))
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"society run MODULE.py --include {EXAMPLE.parent}" in refused.stderr
    ran = society(
        "run", str(matchup), "--include", str(EXAMPLE.parent), "--artifacts", str(tmp_path / "b")
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout)["exit"] == "success"
