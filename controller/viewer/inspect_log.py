"""A run or a suite as an Inspect AI evaluation log, written with ``inspect_ai``'s own log API.

One sample per roster agent of a run (per run and agent of a suite): its transcript as chat
messages (what it sent as the assistant's, what was delivered to it as the user's) and as model
events Inspect's ``messages_df`` reads (each message it sent is a turn: what it had seen before,
then the message), each model gateway call as a ``ModelEvent`` with its usage and cost, each link
drop or hold and each failed call as an ``InfoEvent``; the grader's numbers for that agent as the
sample's scores (``inspect_scores``), the run's own in the log's results; in metadata the ledger's
head digest, signature status, definition id, run id and seed. Every ledger is verified (and every
harvested file re-hashed) before anything is written, so a tampered one leaves no log behind.
``inspect_ai`` is the optional ``inspect`` extra: ``pip install 'society-runner[inspect]'``
(from a checkout, ``.venv/bin/pip install -e '.[inspect]'``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import SetupError
from controller.viewer.inspect_scores import (
    RUN_PREFIX,
    Scalar,
    eval_scores,
    run_results,
    seat_results,
)
from controller.viewer.transcripts import (
    PROGRAM_SUCCEEDED,
    RunTranscripts,
    Transcript,
    read_transcripts,
)

if TYPE_CHECKING:
    from inspect_ai.event import Event
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ChatMessage, ModelUsage

SUITE_FILE = "suite.json"
TURN_MODEL = "none"
"""The model of a transcript turn's event: the ledger says what an agent sent, not what made it."""


class InspectUnavailable(SetupError):
    """``inspect_ai`` is not installed here."""

    reason = "inspect-unavailable"


@dataclass(frozen=True, slots=True)
class GradedRun:
    transcripts: RunTranscripts
    grade: dict[str, Any] | None
    extra: dict[str, Any]
    """What the log's sample metadata adds (a suite's slot, competitors and status)."""


def export_inspect(
    source: Path,
    output: Path,
    *,
    grader: Path | None = None,
    trusted_key: str | None = None,
) -> dict[str, Any]:
    """Write ``source`` (a run or ledger directory, or a suite folder) to ``output`` (an
    ``.eval`` or ``.json`` log); returns what was written. Raises ``LedgerError`` for a ledger
    that does not verify, before writing anything."""
    try:
        from inspect_ai.log import write_eval_log
    except ImportError:
        raise InspectUnavailable(
            "exporting to Inspect needs inspect_ai, which is not installed for this interpreter",
            next_step="pip install 'society-runner[inspect]' (from a checkout: "
            ".venv/bin/pip install -e '.[inspect]'; scripts/bootstrap.sh --all does)",
        ) from None
    if (source / SUITE_FILE).is_file():
        document = json.loads((source / SUITE_FILE).read_text(encoding="utf-8"))
        runs = _suite_runs(source, document, grader, trusted_key)
        log = _log(runs, task=f"society/{document['suite']}", suite=document)
    else:
        transcripts = read_transcripts(source, trusted_key=trusted_key)
        graded = _graded(transcripts, source, grader, trusted_key)
        log = _log([graded], task=f"society/{graded.transcripts.definition_id}", suite=None)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(output))
    samples = log.samples or []
    return {"written": str(output), "samples": len(samples), "runs": len(log.eval.metadata or {})}


def _graded(
    transcripts: RunTranscripts, run_dir: Path, grader: Path | None, trusted_key: str | None
) -> GradedRun:
    """The run graded as ``society grade`` grades it (core and shipped runtimes' events beside
    the grader's catalog)."""
    if grader is None:
        return GradedRun(transcripts, None, {})
    from controller.agents.shipped import shipped_runtime_catalogs
    from controller.events import core_events
    from ledger import EventCatalog
    from ledger.grading import grade_ledger, load_module

    reader = EventCatalog.merge(core_events, *shipped_runtime_catalogs().values())
    grade = grade_ledger(load_module(grader), run_dir, base_catalog=reader, trusted_key=trusted_key)
    return GradedRun(transcripts, grade, {})


def _suite_runs(
    folder: Path, document: dict[str, Any], grader: Path | None, trusted_key: str | None
) -> list[GradedRun]:
    """Every run of the suite that has a ledger, verified; graded by ``grader`` if given, else
    as ``suite.json`` recorded it."""
    runs = []
    for run in document["runs"]:
        if run.get("runId") is None:
            continue
        run_dir = folder / "runs" / run["runId"]
        transcripts = read_transcripts(run_dir, trusted_key=trusted_key)
        graded = _graded(transcripts, run_dir, grader, trusted_key)
        extra = {
            "slot": run["slot"],
            "competitors": run["competitors"],
            "status": run["status"],
            "reason": run.get("reason"),
        }
        runs.append(GradedRun(transcripts, graded.grade or run.get("result"), extra))
    return runs


def _log(runs: list[GradedRun], *, task: str, suite: dict[str, Any] | None) -> EvalLog:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalResults, EvalSpec, EvalStats

    samples = []
    seat_values: list[tuple[str, dict[str, Scalar]]] = []
    run_values: list[tuple[str, dict[str, Scalar]]] = []
    grades: dict[str, Any] = {}
    for run in runs:
        seats = list(run.transcripts.agents)
        by_seat = None if run.grade is None else seat_results(run.grade, seats)
        for transcript in run.transcripts.agents.values():
            values = None if by_seat is None else by_seat[transcript.agent]
            sample = _sample(run, transcript, values, many=suite is not None)
            samples.append(sample)
            if values:
                seat_values.append((str(sample.id), values))
        if run.grade is not None:
            grades[run.transcripts.run_id] = run.grade
            if own := run_results(run.grade, seats):
                run_values.append((run.transcripts.run_id, own))
    first = runs[0].transcripts if runs else None
    metadata: dict[str, Any] = {run.transcripts.run_id: _run_metadata(run) for run in runs}
    results_metadata: dict[str, Any] = {"grades": grades}
    if suite is not None:
        results_metadata["rankings"] = suite.get("rankings")
    usage: dict[str, ModelUsage] = {}
    for sample in samples:
        for model, used in sample.model_usage.items():
            usage[model] = _add(usage.get(model), used)
    return EvalLog(
        status="success"
        if all(r.transcripts.outcome == PROGRAM_SUCCEEDED for r in runs)
        else "error",
        eval=EvalSpec(
            created=first.created_at if first else datetime.now().astimezone().isoformat(),
            task=task,
            dataset=EvalDataset(name=task, samples=len(samples)),
            model="none",
            config=EvalConfig(),
            metadata=metadata,
        ),
        results=EvalResults(
            total_samples=len(samples),
            completed_samples=len(samples),
            scores=[
                *eval_scores(seat_values),
                *eval_scores(run_values, RUN_PREFIX),
            ],
            metadata=results_metadata,
        ),
        stats=EvalStats(
            started_at=min((t for r in runs if (t := r.transcripts.first_at)), default=""),
            completed_at=max((t for r in runs if (t := r.transcripts.last_at)), default=""),
            model_usage=usage,
        ),
        samples=samples,
        metadata={"suite": suite["suite"]}
        if suite is not None
        else {"runId": first and first.run_id},
    )


def _run_metadata(run: GradedRun) -> dict[str, Any]:
    t = run.transcripts
    return {
        "runId": t.run_id,
        "definitionId": t.definition_id,
        "seed": t.seed,
        "headDigest": t.head_digest,
        "signature": t.signature,
        "signedRecords": t.signed_records,
        "records": t.records,
        "outcome": t.outcome,
        **run.extra,
    }


def _sample(
    run: GradedRun, transcript: Transcript, values: dict[str, Scalar] | None, *, many: bool
) -> EvalSample:
    from inspect_ai.log import EvalSample
    from inspect_ai.scorer import Score

    t = run.transcripts
    usage: dict[str, ModelUsage] = {}
    for call in transcript.calls:
        key = f"{call.provider}/{call.model}"
        usage[key] = _add(
            usage.get(key), _usage(call.prompt_tokens, call.completion_tokens, call.cost_usd)
        )
    messages = _messages(t.run_id, transcript)
    events = [*_turn_events(transcript, messages), *_model_events(transcript)]
    events += _info_events(transcript)
    return EvalSample(
        id=f"{t.run_id}/{transcript.agent}" if many else transcript.agent,
        epoch=1,
        input=f"agent {transcript.agent} ({transcript.runtime}) in {t.definition_id}",
        target="",
        messages=messages,
        events=sorted(events, key=lambda event: event.timestamp),
        model_usage=usage,
        scores={field: Score(value=value) for field, value in values.items()} if values else None,
        metadata={**_run_metadata(run), "agent": transcript.agent, "runtime": transcript.runtime},
    )


def _messages(run_id: str, transcript: Transcript) -> list[ChatMessage]:
    """Ids are the run's, the agent's and the ledger's message id: a message is in the sender's
    sample and each receiver's, and Inspect's dataframes keep one row per id."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser

    messages: list[ChatMessage] = []
    for direction, message in transcript.messages:
        id = f"{run_id}/{transcript.agent}/{message.message_id}"
        metadata = {
            "sender": message.sender,
            "conversationId": message.conversation_id,
            "messageId": message.message_id,
            "routerSequence": message.sequence,
        }
        if direction == "sent":
            messages.append(ChatMessageAssistant(id=id, content=message.text, metadata=metadata))
        else:
            messages.append(ChatMessageUser(id=id, content=message.text, metadata=metadata))
    return messages


def _turn_events(transcript: Transcript, messages: list[ChatMessage]) -> list[Event]:
    """Each message the agent sent as a model event (model ``none``, no usage): its input what
    the agent had sent and been delivered before, its output the message; messages delivered
    after its last one close with an event of no output. Inspect's ``messages_df`` reads a
    sample's messages from these."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.model import GenerateConfig, ModelOutput

    events: list[Event] = []
    answered = 0
    for index, ((direction, message), chat) in enumerate(
        zip(transcript.messages, messages, strict=True)
    ):
        if direction != "sent":
            continue
        output = ModelOutput.from_message(chat)
        output.model = TURN_MODEL
        events.append(
            ModelEvent(
                timestamp=_time(message.observed_at),
                model=TURN_MODEL,
                input=messages[:index],
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=output,
                metadata={"turn": "sent", "messageId": message.message_id},
            )
        )
        answered = index + 1
    if answered < len(messages):
        events.append(
            ModelEvent(
                timestamp=_time(transcript.messages[-1][1].observed_at),
                model=TURN_MODEL,
                input=messages,
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=ModelOutput(model=TURN_MODEL),
                metadata={"turn": "unanswered"},
            )
        )
    return events


def _model_events(transcript: Transcript) -> list[Event]:
    from inspect_ai.event import ModelEvent
    from inspect_ai.model import GenerateConfig, ModelOutput

    events: list[Event] = []
    for call in transcript.calls:
        usage = _usage(call.prompt_tokens, call.completion_tokens, call.cost_usd)
        events.append(
            ModelEvent(
                timestamp=_time(call.observed_at),
                model=f"{call.provider}/{call.model}",
                input=[],
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=ModelOutput(model=call.model, usage=usage),
                working_time=call.latency_ms / 1000,
                metadata={
                    "promptTokens": call.prompt_tokens,
                    "completionTokens": call.completion_tokens,
                    "costUsd": call.cost_usd,
                    "latencyMs": call.latency_ms,
                    "attempts": call.attempts,
                },
            )
        )
    return events


def _info_events(transcript: Transcript) -> list[Event]:
    from inspect_ai.event import InfoEvent

    return [
        InfoEvent(timestamp=_time(notice.observed_at), source=notice.tag, data=notice.event)
        for notice in transcript.notices
    ]


def _usage(prompt: int | None, completion: int | None, cost: float | None) -> ModelUsage:
    from inspect_ai.model import ModelUsage

    return ModelUsage(
        input_tokens=prompt or 0,
        output_tokens=completion or 0,
        total_tokens=(prompt or 0) + (completion or 0),
        total_cost=cost,
    )


def _add(total: ModelUsage | None, used: ModelUsage) -> ModelUsage:
    if total is None:
        return used
    cost = (
        None
        if total.total_cost is None or used.total_cost is None
        else total.total_cost + used.total_cost
    )
    return total.model_copy(
        update={
            "input_tokens": total.input_tokens + used.input_tokens,
            "output_tokens": total.output_tokens + used.output_tokens,
            "total_tokens": total.total_tokens + used.total_tokens,
            "total_cost": cost,
        }
    )


def _time(observed_at: str) -> datetime:
    return datetime.fromisoformat(observed_at.replace("Z", "+00:00"))
