"""``society ledger export DIR --format parquet|csv``: real runs and a real suite as tables, read
back with pandas and counted against the ledgers they came from; docs/analysis.md's recipe runs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from controller.errors import SetupError
from controller.viewer.table_files import export_tables
from ledger import VERIFICATION_REASONS

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
FIXED_TABLES = ("messages", "deliveries", "link_events", "model_usage", "runs")


def society(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SOCIETY, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "ledger" / "main" / "records.ndjson").read_text().splitlines()
    return [json.loads(line)["event"] for line in lines]


def tag_counts(run_dir: Path) -> Counter[str]:
    return Counter(event["tag"] for event in records(run_dir))


def export(source: Path, output: Path, table_format: str = "parquet") -> dict[str, Any]:
    done = society("ledger", "export", source, "--format", table_format, "-o", output)
    assert done.returncode == 0, done.stderr
    line: dict[str, Any] = json.loads(done.stdout)
    return line


@pytest.fixture(scope="module")
def partition_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of examples/partition.py: ann and ben's links are down during ticks 4-6."""
    root = tmp_path_factory.mktemp("partition")
    done = society("run", ROOT / "examples" / "partition.py", "--artifacts", root)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(json.loads(done.stdout)["ledger"]).parents[1]


@pytest.fixture(scope="module")
def bid_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real pairs suite (programs/bid_suite.py): two bidders in both seatings, one seed."""
    root = tmp_path_factory.mktemp("suite")
    done = society("suite", "run", PROGRAMS / "bid_suite.py", "--artifacts", root, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "bids-v1"


@pytest.fixture(scope="module")
def suite_runs(bid_suite: Path) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads((bid_suite / "suite.json").read_text())["runs"]
    return runs


def test_each_table_of_a_partitioned_run_holds_as_many_rows_as_its_ledger_has_records(
    partition_run: Path, tmp_path: Path
) -> None:
    line = export(partition_run, tmp_path / "tables")
    tables = tmp_path / "tables"
    counts = tag_counts(partition_run)
    delivered = sum(
        len(event["messageIds"])
        for event in records(partition_run)
        if event["tag"] == "society.router-messages-delivered/v1"
    )
    link_tags = [tag for tag in counts if tag.startswith("society.link-")]

    assert line["tables"] == {
        "messages.parquet": counts["society.router-message-committed/v1"],
        "deliveries.parquet": delivered,
        "link_events.parquet": sum(counts[tag] for tag in link_tags),
        "model_usage.parquet": 0,
        "runs.parquet": 1,
        "events/acme.partition-window.v1.parquet": 1,
    }
    assert json.loads((tables / "tables.json").read_text()) == line
    messages = pd.read_parquet(tables / "messages.parquet")
    assert len(messages) == counts["society.router-message-committed/v1"] == 36
    assert set(messages.sender) == {"endpoint:workload", "agent:ann", "agent:ben", "agent:cat"}
    first = messages.iloc[0]
    assert (first.sender, first.text) == ("endpoint:workload", "tick 1")
    assert list(first.receivers) == ["agent:ann", "agent:ben", "agent:cat"]
    deliveries = pd.read_parquet(tables / "deliveries.parquet")
    assert (deliveries.latency_s >= 0).all() and deliveries.sender.notna().all()
    assert str(deliveries.time.dtype) == "datetime64[us, UTC]"


def test_a_partitioned_run_s_drops_carry_their_reason_and_message(
    partition_run: Path, tmp_path: Path
) -> None:
    export(partition_run, tmp_path / "tables")
    links = pd.read_parquet(tmp_path / "tables" / "link_events.parquet")
    messages = pd.read_parquet(tmp_path / "tables" / "messages.parquet")
    dropped = [e for e in records(partition_run) if e["tag"] == "society.link-message-dropped/v1"]

    drops = links[links.event == "dropped"]
    assert len(drops) == len(dropped) > 0
    assert set(drops.reason) == {"link-down"}
    assert sorted(drops.message_id) == sorted(e["messageId"] for e in dropped)
    lost = drops.merge(messages, on=["run_id", "message_id"], suffixes=("", "_sent"))
    assert all(re.fullmatch(r"(ann|ben) saw tick [456]", text) for text in lost.text)
    assert Counter(links.event) == Counter({"dropped": 6, "down": 2, "up": 2})
    window = pd.read_parquet(tmp_path / "tables" / "events" / "acme.partition-window.v1.parquet")
    assert (window["first"].item(), window["last"].item()) == (4, 6)
    assert [list(pair) for pair in window.links.item()] == [
        ["agent:ann", "agent:ben"],
        ["agent:ben", "agent:ann"],
    ]


def test_csv_holds_the_same_rows_as_parquet_with_lists_as_json(
    partition_run: Path, tmp_path: Path
) -> None:
    parquet = export(partition_run, tmp_path / "parquet")
    csv = export(partition_run, tmp_path / "csv", "csv")

    assert {k.removesuffix(".parquet"): v for k, v in parquet["tables"].items()} == {
        k.removesuffix(".csv"): v for k, v in csv["tables"].items()
    }
    from_parquet = pd.read_parquet(tmp_path / "parquet" / "messages.parquet")
    from_csv = pd.read_csv(
        tmp_path / "csv" / "messages.csv",
        parse_dates=["time"],
        converters={"receivers": json.loads},
    )
    assert list(from_csv.columns) == list(from_parquet.columns)
    assert list(from_csv.text) == list(from_parquet.text)
    assert list(from_csv.receivers) == [list(r) for r in from_parquet.receivers]
    assert (from_csv.time == from_parquet.time).all()
    links = pd.read_csv(tmp_path / "csv" / "link_events.csv")
    assert sorted(links[links.event == "dropped"].reason.unique()) == ["link-down"]


def test_a_suite_exports_every_run_with_its_slot_and_the_grader_output_flattened(
    bid_suite: Path, suite_runs: list[dict[str, Any]], tmp_path: Path
) -> None:
    line = export(bid_suite, tmp_path / "tables")
    tables = tmp_path / "tables"
    run_dirs = [bid_suite / "runs" / run["runId"] for run in suite_runs]
    committed = sum(tag_counts(d)["society.router-message-committed/v1"] for d in run_dirs)

    assert (line["suite"], line["resultField"], line["runs"]) == ("bids-v1", "winner", 2)
    runs = pd.read_parquet(tables / "runs.parquet")
    assert list(runs.run_id) == [run["runId"] for run in suite_runs]
    assert [list(c) for c in runs.competitors] == [run["competitors"] for run in suite_runs]
    assert list(runs.slot) == ["ann.ben/seed-1", "ben.ann/seed-1"]
    assert list(runs.matchup) == ["ann.ben", "ben.ann"]
    assert list(runs.seed) == [1, 1]
    assert list(runs["result.winner"]) == [run["result"]["winner"] for run in suite_runs]
    assert list(runs["result.bids.ben"]) == [5, 5]
    assert set(runs.outcome) == {"program-succeeded"} and set(runs.status) == {"ranked"}
    messages = pd.read_parquet(tables / "messages.parquet")
    assert len(messages) == committed and set(messages.run_id) == set(runs.run_id)
    bids = pd.read_parquet(tables / "events" / "acme.bids-seen.v1.parquet")
    assert list(bids.run_id) == list(runs.run_id)
    assert list(bids.first_seat) == ["ann", "ben"]
    assert (list(bids["bids.ann"]), list(bids["bids.ben"])) == ([3, 3], [5, 5])


def tamper(run_dir: Path) -> None:
    ledger = run_dir / "ledger" / "main" / "records.ndjson"
    text = ledger.read_text()
    assert '"parts":["tick 1"]' in text
    ledger.write_text(text.replace('"parts":["tick 1"]', '"parts":["tick 2"]', 1))


def test_a_tampered_ledger_is_refused_with_its_reason_and_nothing_is_written(
    partition_run: Path, tmp_path: Path
) -> None:
    copy = tmp_path / partition_run.name
    shutil.copytree(partition_run, copy)
    tamper(copy)

    done = society("ledger", "export", copy, "--format", "parquet", "-o", tmp_path / "tables")

    assert done.returncode == 1 and done.stdout == ""
    reason = re.match(r"society ledger export: error \(([a-z-]+)\): ", done.stderr)
    assert reason is not None, done.stderr
    assert reason.group(1) in VERIFICATION_REASONS
    assert not (tmp_path / "tables").exists()


def test_a_suite_with_one_tampered_ledger_is_refused(
    bid_suite: Path, suite_runs: list[dict[str, Any]], tmp_path: Path
) -> None:
    copy = tmp_path / "bids-v1"
    shutil.copytree(bid_suite, copy, ignore=shutil.ignore_patterns(".temporal", "logs"))
    ledger = copy / "runs" / suite_runs[1]["runId"] / "ledger" / "main" / "records.ndjson"
    ledger.write_text(ledger.read_text().replace("ann bids 3", "ann bids 9", 1))

    done = society("ledger", "export", copy, "--format", "csv", "-o", tmp_path / "tables")

    assert done.returncode == 1, done.stdout
    assert "society ledger export: error (" in done.stderr
    assert not (tmp_path / "tables").exists()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ((), "exactly one of them, not neither"),
        (("gs://bucket", "--format", "csv"), "exactly one of them, not both"),
        (("gs://bucket", "-o", "out"), "-o OUT_DIR is where --format writes tables"),
    ],
    ids=["neither", "both", "output-with-bucket"],
)
def test_export_takes_a_bucket_or_a_format_exactly_one(
    partition_run: Path, tmp_path: Path, arguments: tuple[str, ...], says: str
) -> None:
    done = society("ledger", "export", partition_run, *arguments, cwd=tmp_path)

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("society ledger export: error: "), done.stderr
    assert says in done.stderr and "next step: " in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_export_is_replaced_and_any_other_folder_refused(
    partition_run: Path, tmp_path: Path
) -> None:
    output = tmp_path / "tables"
    export(partition_run, output)
    export(partition_run, output, "csv")
    assert sorted(p.name for p in output.rglob("*") if p.is_file()) == sorted(
        [*(f"{name}.csv" for name in FIXED_TABLES), "acme.partition-window.v1.csv", "tables.json"]
    )

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    done = society("ledger", "export", partition_run, "--format", "csv", "-o", tmp_path / "notes")
    assert done.returncode == 1
    assert "error (export-target-not-empty)" in done.stderr
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["mine.txt"]


def test_without_o_the_tables_go_under_tables_named_by_the_run_id(
    partition_run: Path, tmp_path: Path
) -> None:
    done = society("ledger", "export", partition_run, "--format", "parquet", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] == f"tables/{partition_run.name}"
    assert (tmp_path / "tables" / partition_run.name / "messages.parquet").is_file()


def test_without_pyarrow_the_error_names_the_analysis_extra(
    partition_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError

    with pytest.raises(SetupError) as raised:
        export_tables(partition_run, tmp_path / "tables", table_format="parquet")

    assert raised.value.reason == "analysis-unavailable"
    assert "pip install -e '.[analysis]'" in str(raised.value)
    assert not (tmp_path / "tables").exists()


def test_the_recipe_of_docs_analysis_runs_against_a_real_run_and_suite(
    partition_run: Path, bid_suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "docs" / "analysis.md").read_text()
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    exports = [
        line.split()[1:]
        for language, body in blocks
        if language == "sh"
        for line in body.splitlines()
        if line.startswith("society ledger export ")
    ]
    places = {"RUN_DIR": str(partition_run), "SUITE_DIR": str(bid_suite)}
    assert len(exports) == 3
    for arguments in exports:
        done = society(*(places.get(word, word) for word in arguments), cwd=tmp_path)
        assert done.returncode == 0, done.stderr

    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    python = [body for language, body in blocks if language == "python"]
    assert len(python) == 2
    for body in python:
        exec(compile(body, "docs/analysis.md", "exec"), namespace)

    assert namespace["drops_by_reason"].to_dict() == {"link-down": 6}
    assert namespace["sent_by_agent"].to_dict() == {"agent:ann": 9, "agent:ben": 9, "agent:cat": 9}
    assert len(namespace["lost"]) == 6 and len(namespace["messages_csv"]) == 36
    assert namespace["win_rate"].to_dict() == {"ben": 1.0, "ann": 0.0}
    assert list(namespace["overview"].messages) == [3, 3]


def _require_local_model() -> None:
    """Skip without the local model, except under CI (env CI set), where that is a failure."""
    if importlib.util.find_spec("xllamacpp") is not None:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the real-model tests)")
    pytest.skip(message)


def test_model_usage_has_one_row_per_call_summing_to_the_run_s_usage(tmp_path: Path) -> None:
    _require_local_model()
    ran = society(
        "run", ROOT / "tests" / "forks" / "programs" / "llm_zero.py", "--artifacts", tmp_path / "a"
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    run_dir = Path(result["ledger"]).parents[1]

    export(run_dir, tmp_path / "tables", "csv")

    usage = pd.read_csv(tmp_path / "tables" / "model_usage.csv")
    total = result["usage"]["total"]
    assert len(usage) == tag_counts(run_dir)["society.agent-model-usage/v1"] == total["calls"]
    assert set(usage.agent) == {"lea"} and not usage.failed.any()
    assert usage.prompt_tokens.sum() == total["promptTokens"]
    assert usage.completion_tokens.sum() == total["completionTokens"]
    assert usage.cost_usd.sum() == pytest.approx(total["costUsd"])
