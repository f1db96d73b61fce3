"""``society ledger export-inspect``: runs and suites as Inspect AI logs, read back with
``inspect_ai.log.read_eval_log`` and compared with the ledgers they came from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from forks_support import EXAMPLES, PROGRAMS, Society
from inspect_ai.event import InfoEvent, ModelEvent
from inspect_ai.log import read_eval_log

pytestmark = pytest.mark.slow

COUNTING_GRADER = PROGRAMS / "echo_suite_grade.py"


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "ledger" / "main" / "records.ndjson").read_text().splitlines()
    return [json.loads(line) for line in lines]


def events(run_dir: Path, tag: str) -> list[dict[str, Any]]:
    return [r["event"] for r in records(run_dir) if r["event"]["tag"] == tag]


def transcript_of(run_dir: Path, agent: str) -> list[tuple[str, str]]:
    """(role, text) of every message the agent sent or was delivered, in router order."""
    committed = {e["messageId"]: e for e in events(run_dir, "society.router-message-committed/v1")}
    seen: list[tuple[int, str, str]] = []
    for message in committed.values():
        if message["senderId"] == f"agent:{agent}":
            seen.append((message["routerSequence"], "assistant", "\n".join(message["parts"])))
    for delivered in events(run_dir, "society.router-messages-delivered/v1"):
        if delivered["receiverId"] == f"agent:{agent}":
            for message_id in delivered["messageIds"]:
                message = committed[message_id]
                seen.append((message["routerSequence"], "user", "\n".join(message["parts"])))
    return [(role, text) for _, role, text in sorted(seen, key=lambda item: item[0])]


def test_an_llm_run_reads_back_with_every_message_and_usage_figure_of_its_ledger(
    society: Society, llm_run: Path
) -> None:
    run_dir = llm_run
    log_file = society.artifacts.parent / "run.eval"

    exported = society(
        "ledger", "export-inspect", run_dir, "-o", log_file, "--grader", COUNTING_GRADER
    )

    assert exported.code == 0, exported.stderr
    assert exported.line() == {"written": str(log_file), "samples": 1, "runs": 1}
    log = read_eval_log(str(log_file))
    assert log.status == "success" and log.eval.task == "society/acme.llm-zero/v1"
    [sample] = log.samples or []
    assert sample.id == "lea"
    assert [(m.role, m.text) for m in sample.messages] == transcript_of(run_dir, "lea")
    assert len(sample.messages) == 4

    calls = events(run_dir, "society.agent-model-usage/v1")
    assert len(calls) == 2
    model_events = [e for e in sample.events if isinstance(e, ModelEvent)]
    assert [
        (e.output.usage.input_tokens, e.output.usage.output_tokens, e.output.usage.total_cost)
        for e in model_events
        if e.output.usage is not None
    ] == [(c["promptTokens"], c["completionTokens"], c["costUsd"]) for c in calls]
    assert {e.model for e in model_events} == {f"{c['provider']}/{c['model']}" for c in calls}
    [(model, usage)] = sample.model_usage.items()
    assert usage.input_tokens == sum(c["promptTokens"] for c in calls)
    assert usage.output_tokens == sum(c["completionTokens"] for c in calls)
    assert log.stats.model_usage[model] == usage

    completion = json.loads((run_dir / "ledger" / "main" / "completion.json").read_text())
    started = events(run_dir, "society.run-started/v1")[0]
    metadata = sample.metadata
    assert metadata["runId"] == run_dir.name and metadata["headDigest"] == completion["headDigest"]
    assert metadata["signature"] == "self" and metadata["seed"] == started["seed"]
    assert metadata["definitionId"] == "acme.llm-zero/v1"
    assert sample.scores is not None
    score = sample.scores["grader"]
    assert score.value == {"score": 2} and score.metadata is not None
    assert score.metadata["output"]["texts"] == [
        m.text for m in sample.messages if m.role == "assistant"
    ]


def test_a_partitioned_run_shows_each_dropped_delivery_as_an_info_event(society: Society) -> None:
    run_dir = society.run_dir(society.run(EXAMPLES / "partition.py"))
    log_file = society.artifacts.parent / "partition.eval"

    assert society("ledger", "export-inspect", run_dir, "-o", log_file).code == 0

    log = read_eval_log(str(log_file))
    samples = {sample.id: sample for sample in log.samples or []}
    assert set(samples) == {"ann", "ben", "cat"}
    dropped = events(run_dir, "society.link-message-dropped/v1")
    assert dropped
    for name, sample in samples.items():
        info = [e.data for e in sample.events if isinstance(e, InfoEvent)]
        mine = [e for e in dropped if f"agent:{name}" in (e["senderId"], e["receiverId"])]
        assert [d for d in info if d["tag"] == "society.link-message-dropped/v1"] == mine
        assert [(m.role, m.text) for m in sample.messages] == transcript_of(run_dir, name)
    assert samples["cat"].scores is None and not [
        e for e in samples["cat"].events if isinstance(e, InfoEvent)
    ]


def test_a_suite_exports_one_sample_per_run_and_agent_with_its_rankings(
    society: Society,
) -> None:
    ran = society("suite", "run", PROGRAMS / "echo_suite.py", "--artifacts", society.artifacts)
    assert ran.code == 0, ran.stderr
    folder = society.artifacts / "echo-v1"
    log_file = society.artifacts.parent / "suite.eval"

    exported = society("ledger", "export-inspect", folder, "-o", log_file)

    assert exported.code == 0, exported.stderr
    report = json.loads((folder / "suite.json").read_text())
    log = read_eval_log(str(log_file))
    by_id = {sample.id: sample for sample in log.samples or []}
    expected = {f"{run['runId']}/{run['competitors'][0]}": run for run in report["runs"]}
    assert set(by_id) == set(expected)
    for sample_id, run in expected.items():
        sample = by_id[sample_id]
        assert sample.metadata["slot"] == run["slot"] and sample.metadata["status"] == "ranked"
        assert sample.metadata["headDigest"] == run["ledgerDigest"]
        assert sample.scores is not None
        assert sample.scores["grader"].value == {"score": run["result"]["score"]}
    assert log.results is not None and log.results.metadata is not None
    assert log.results.metadata["rankings"] == report["rankings"]
    assert log.eval.task == "society/echo-v1"


def test_a_tampered_ledger_is_refused_before_anything_is_written(
    society: Society, hello_run: Path
) -> None:
    tampered = society.artifacts / "tampered"
    shutil.copytree(hello_run, tampered)
    ledger = tampered / "ledger" / "main" / "records.ndjson"
    ledger.write_text(ledger.read_text().replace("hello ben", "hello bob"))
    log_file = society.artifacts.parent / "tampered.eval"

    exported = society("ledger", "export-inspect", tampered, "-o", log_file)

    assert exported.code == 1 and exported.stdout == ""
    assert "society ledger export-inspect: error:" in exported.stderr
    assert not log_file.exists()


def test_a_changed_harvested_file_is_refused_before_anything_is_written(
    society: Society, hello_run: Path
) -> None:
    run_dir = society.artifacts / hello_run.name
    shutil.copytree(hello_run, run_dir)
    harvested = next(p for p in (run_dir / "artifacts").rglob("*") if p.is_file())
    harvested.write_bytes(harvested.read_bytes() + b"forged")
    log_file = society.artifacts.parent / "changed.eval"

    exported = society("ledger", "export-inspect", run_dir, "-o", log_file)

    assert exported.code == 1 and "society ledger export-inspect: error:" in exported.stderr
    assert not log_file.exists()
