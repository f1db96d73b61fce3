"""``society ledger export-inspect``: runs and suites as Inspect AI logs, read back with
``inspect_ai.log.read_eval_log`` and Inspect's dataframes and compared with the ledgers (and the
grader's output) they came from."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from forks_support import EXAMPLES, PROGRAMS, ROOT, Society
from inspect_ai.analysis import evals_df, events_df, messages_df, samples_df
from inspect_ai.event import InfoEvent, ModelEvent
from inspect_ai.log import EvalLog, read_eval_log

pytestmark = pytest.mark.slow

COUNTING_GRADER = PROGRAMS / "echo_suite_grade.py"
SEATS_GRADER = PROGRAMS / "negotiation_seats_grade.py"
PD_SUITE = PROGRAMS / "pd_suite.py"


@pytest.fixture(scope="module")
def pd_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prisoner's dilemma suite run once for this module: dove and hawk, each seat once."""
    home = Society(tmp_path_factory.mktemp("pd") / "artifacts")
    ran = home("suite", "run", PD_SUITE, "--artifacts", home.artifacts)
    assert ran.code == 0, ran.stderr
    return home.artifacts / "pd-v1"


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


def score_values(log: EvalLog) -> dict[str, dict[str, Any]]:
    """Each sample's scores as ``{field: value}``, by sample id."""
    return {
        str(sample.id): {name: score.value for name, score in (sample.scores or {}).items()}
        for sample in log.samples or []
    }


def assert_metrics(log: EvalLog, expected: dict[str, list[float]]) -> None:
    """``results.scores`` holds, per field, the mean and stderr of exactly these values."""
    assert log.results is not None
    metrics = {
        score.name: {name: metric.value for name, metric in score.metrics.items()}
        for score in log.results.scores
    }
    assert set(metrics) == set(expected)
    for name, values in expected.items():
        assert metrics[name]["mean"] == pytest.approx(statistics.mean(values)), name
        stderr = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0
        assert metrics[name]["stderr"] == pytest.approx(stderr), name


def assert_dataframes_read(log_file: Path, log: EvalLog) -> None:
    """Inspect's four dataframes read the log: one row per sample with its score columns, each
    sample's messages in order, its events, and the eval with a column per metric."""
    assert log.results is not None
    samples = samples_df(str(log_file))
    assert len(samples) == len(log.samples or [])
    by_sample = {str(row["id"]): row for _, row in samples.iterrows()}
    for sample_id, values in score_values(log).items():
        assert {name: by_sample[sample_id][f"score_{name}"] for name in values} == values

    messages = messages_df(str(log_file))
    assert {"message_id", "role", "content", "sample_id", "order"} <= set(messages.columns)
    assert len(messages) == sum(len(sample.messages) for sample in log.samples or [])
    for sample in log.samples or []:
        rows = messages[messages["sample_id"] == by_sample[str(sample.id)]["sample_id"]]
        ordered = rows.sort_values("order")
        read = list(zip(ordered["role"], ordered["content"], strict=True))
        assert read == [(m.role, m.text) for m in sample.messages]

    events = events_df(str(log_file))
    assert {"event_id", "event", "sample_id"} <= set(events.columns)
    assert len(events) == sum(len(sample.events) for sample in log.samples or [])
    assert "model" in set(events["event"])

    [evaluation] = [row for _, row in evals_df(str(log_file)).iterrows()]
    assert evaluation["eval_id"] == log.eval.eval_id
    assert evaluation["total_samples"] == len(log.samples or [])
    assert evaluation["score_headline_value"] == log.results.scores[0].metrics["mean"].value
    for score in log.results.scores:
        for name, metric in score.metrics.items():
            assert evaluation[f"score_{score.name}_{name}"] == pytest.approx(metric.value)


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
    turns = [e for e in sample.events if isinstance(e, ModelEvent) and e.model == "none"]
    model_events = [e for e in sample.events if isinstance(e, ModelEvent) and e.model != "none"]
    assert [
        (e.output.usage.input_tokens, e.output.usage.output_tokens, e.output.usage.total_cost)
        for e in model_events
        if e.output.usage is not None
    ] == [(c["promptTokens"], c["completionTokens"], c["costUsd"]) for c in calls]
    assert {e.model for e in model_events} == {f"{c['provider']}/{c['model']}" for c in calls}
    assert [e.output.message.text for e in turns if not e.output.empty] == [
        m.text for m in sample.messages if m.role == "assistant"
    ]
    assert all(e.output.usage is None for e in turns)
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
    assert score_values(log) == {"lea": {"score": 2}}
    assert log.results is not None and log.results.metadata is not None
    assert log.results.metadata["grades"][run_dir.name]["texts"] == [
        m.text for m in sample.messages if m.role == "assistant"
    ]
    assert_dataframes_read(log_file, log)


def test_each_seat_of_a_run_is_scored_with_its_own_numbers_and_the_run_keeps_its_own(
    society: Society,
) -> None:
    run_dir = society.run_dir(society.run(EXAMPLES / "negotiation.py"))
    log_file = society.artifacts.parent / "negotiation.eval"
    graded = society("grade", SEATS_GRADER, run_dir)
    assert graded.code == 0, graded.stderr
    grade = graded.line()

    exported = society(
        "ledger", "export-inspect", run_dir, "-o", log_file, "--grader", SEATS_GRADER
    )

    assert exported.code == 0, exported.stderr
    log = read_eval_log(str(log_file))
    seats = {
        seat: {
            "share": grade["share"][seat],
            "accepted": grade["accepted"][seat],
            "sent": grade["sent"][f"agent:{seat}"],
        }
        for seat in ("alice", "bob")
    }
    assert score_values(log) == seats
    assert seats["alice"]["share"] != seats["bob"]["share"]
    assert seats["alice"]["accepted"] != seats["bob"]["accepted"]
    assert log.results is not None and log.results.metadata is not None
    assert log.results.metadata["grades"] == {run_dir.name: grade}
    for sample in log.samples or []:  # the run's output is the log's, not every seat's
        assert not set(grade) & set(sample.metadata)
        assert grade["proposal"] not in json.dumps([sample.metadata, sample.scores], default=str)
    assert_metrics(
        log,
        {
            "share": [seats["alice"]["share"], seats["bob"]["share"]],
            "accepted": [seats["alice"]["accepted"], seats["bob"]["accepted"]],
            "sent": [seats["alice"]["sent"], seats["bob"]["sent"]],
            "run_agreed": [grade["agreed"]],
            "run_proposals": [grade["proposals"]],
        },
    )
    assert_dataframes_read(log_file, log)


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
        assert score_values(log)[sample_id] == {"score": run["result"]["score"]}
    assert log.results is not None and log.results.metadata is not None
    assert log.results.metadata["rankings"] == report["rankings"]
    assert log.eval.task == "society/echo-v1"
    assert_dataframes_read(log_file, log)


def test_a_score_suite_scores_each_seat_with_its_payoff_and_inspect_dataframes_read_it(
    society: Society, pd_suite: Path
) -> None:
    folder = pd_suite
    log_file = society.artifacts.parent / "pd.eval"

    exported = society("ledger", "export-inspect", folder, "-o", log_file)

    assert exported.code == 0, exported.stderr
    assert exported.line()["samples"] == 4
    report = json.loads((folder / "suite.json").read_text())
    log = read_eval_log(str(log_file))
    expected = {
        f"{run['runId']}/{seat}": {
            "payoff": run["result"]["payoff"][seat],
            "cooperated": run["result"]["cooperated"][seat],
        }
        for run in report["runs"]
        for seat in run["competitors"]
    }
    assert score_values(log) == expected
    assert {values["payoff"] for values in expected.values()} == {0, 5}
    assert log.results is not None and log.results.metadata is not None
    assert log.results.metadata["grades"] == {run["runId"]: run["result"] for run in report["runs"]}
    assert log.results.metadata["rankings"] == report["rankings"]
    assert_metrics(
        log,
        {
            "payoff": [values["payoff"] for values in expected.values()],
            "cooperated": [values["cooperated"] for values in expected.values()],
            "run_defections": [run["result"]["defections"] for run in report["runs"]],
        },
    )
    assert_dataframes_read(log_file, log)


def test_the_dataframe_recipe_of_docs_inspect_reads_a_real_run_and_suite(
    society: Society, pd_suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = society.run_dir(society.run(EXAMPLES / "negotiation.py"))
    for source, name in ((run_dir, "run.eval"), (pd_suite, "suite.eval")):
        exported = society("ledger", "export-inspect", source, "-o", tmp_path / name)
        assert exported.code == 0, exported.stderr
    text = (ROOT / "docs" / "inspect.md").read_text()
    [recipe] = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}

    exec(compile(recipe, "docs/inspect.md", "exec"), namespace)

    report = json.loads((pd_suite / "suite.json").read_text())
    payoffs: dict[str, list[int]] = {}
    for run in report["runs"]:
        for seat, points in run["result"]["payoff"].items():
            payoffs.setdefault(seat, []).append(points)
    by_agent = namespace["by_agent"]
    assert {agent: by_agent.loc[agent, "score_payoff"] for agent in payoffs} == {
        agent: statistics.mean(points) for agent, points in payoffs.items()
    }
    assert {"score_payoff_mean", "score_payoff_stderr"} <= set(namespace["metrics"].columns)
    assert namespace["sent"].to_dict() == {
        agent: sum(role == "assistant" for role, _ in transcript_of(run_dir, agent))
        for agent in ("alice", "bob")
    }
    assert set(namespace["events"]["event"]) == {"model"}


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
