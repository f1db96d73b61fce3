"""Each agent's transcript of a verified run, as data an evaluation log can hold.

An agent's transcript is what it sent and what was delivered to it (in router-sequence order, as
the ledger committed it), each model-gateway call it made (its usage and cost), and each
delivery to or from it that a link policy dropped or held. Nothing here imports an evaluation
framework: ``inspect_log`` turns transcripts into Inspect's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.viewer.conversations import (
    COMMITTED,
    DELIVERED,
    DROPPED,
    HELD,
    Message,
    MessageBook,
)
from ledger.run_artifacts import locate_ledger, require_run_artifacts
from ledger.verification import Verification, verify_ledger

RUN_STARTED = "society.run-started/v1"
MODEL_USAGE = "society.agent-model-usage/v1"
MODEL_CALL_FAILED = "society.agent-model-call-failed/v1"
PROGRAM_SUCCEEDED = "society.program-succeeded/v2"
PROGRAM_SUCCEEDED_V1 = "society.program-succeeded/v1"
"""Older ledgers' record of a program that returned; read as ``PROGRAM_SUCCEEDED``."""
OUTCOMES = (
    PROGRAM_SUCCEEDED,
    PROGRAM_SUCCEEDED_V1,
    "society.program-failed/v1",
    "society.program-interrupted/v1",
    "society.platform-failed/v1",
)


@dataclass(frozen=True, slots=True)
class ModelCall:
    provider: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    latency_ms: float
    attempts: int
    observed_at: str


@dataclass(frozen=True, slots=True)
class Notice:
    """A link drop or hold, or a failed model call: evidence, not a message."""

    tag: str
    event: dict[str, Any]
    observed_at: str


@dataclass(slots=True)
class Transcript:
    agent: str
    runtime: str
    messages: list[tuple[str, Message]] = field(default_factory=list)
    """``("sent" | "received", message)`` in router-sequence order."""
    calls: list[ModelCall] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunTranscripts:
    """A verified run: its identity, its verification, each roster agent's transcript."""

    run_id: str
    definition_id: str
    seed: int
    created_at: str
    first_at: str | None
    """When its first record was observed, and its last (``observedAt``)."""
    last_at: str | None
    head_digest: str | None
    signature: str
    signed_records: int
    records: int
    outcome: str | None
    """The program's outcome tag (``society.program-succeeded/v2``, ...), if one was recorded."""
    agents: dict[str, Transcript]


def read_transcripts(path: Path, *, trusted_key: str | None = None) -> RunTranscripts:
    """Verify the run (a run directory's harvested files too) and read every agent's transcript.

    Raises ``LedgerError`` (``LedgerVerificationError``, ``RunArtifactsError``) on the first
    check that fails, before anything is read for export.
    """
    ledger, run_dir = locate_ledger(path)
    verified = verify_ledger(None, ledger, require_catalog=False, trusted_key=trusted_key)
    if run_dir is not None:
        require_run_artifacts(run_dir, verified.envelopes)
    return _transcripts(verified)


def _transcripts(verified: Verification) -> RunTranscripts:
    started: dict[str, Any] = {}
    agents: dict[str, Transcript] = {}
    book = MessageBook()
    outcome: str | None = None
    for envelope in verified.envelopes:
        tag, event, at = envelope.tag, envelope.event, envelope.observed_at
        book.add(
            tag,
            event,
            record=envelope.logical_sequence,
            elapsed_nanos=envelope.elapsed_nanos,
            observed_at=at,
        )
        if tag == RUN_STARTED:
            started = event
            runtimes = event["runtimes"]
            agents = {name: Transcript(name, runtimes.get(name, "?")) for name in event["roster"]}
        elif tag == COMMITTED:
            message = book.messages[event["messageId"]].message
            sender = _agent(message.sender, agents)
            if sender is not None:
                sender.messages.append(("sent", message))
        elif tag == DELIVERED:
            receiver = _agent(event["receiverId"], agents)
            if receiver is not None:
                received = [book.messages[i].message for i in book.message_ids_of(event)]
                receiver.messages.extend(("received", message) for message in received)
        elif tag in (DROPPED, HELD):
            for who in {event.get("senderId"), event.get("receiverId")}:
                agent = _agent(str(who), agents)
                if agent is not None:
                    agent.notices.append(Notice(tag, event, at))
        elif tag == MODEL_USAGE and event["agent"] in agents:
            agents[event["agent"]].calls.append(_call(event, at))
        elif tag == MODEL_CALL_FAILED and event["agent"] in agents:
            agents[event["agent"]].notices.append(Notice(tag, event, at))
        elif tag in OUTCOMES:
            outcome = PROGRAM_SUCCEEDED if tag == PROGRAM_SUCCEEDED_V1 else tag
    for transcript in agents.values():
        transcript.messages.sort(key=lambda entry: entry[1].sequence)
    completion = verified.completion
    return RunTranscripts(
        run_id=verified.manifest.run_id,
        definition_id=verified.manifest.definition_id,
        seed=int(started.get("seed", 0)),
        created_at=verified.manifest.created_at,
        first_at=verified.envelopes[0].observed_at if verified.envelopes else None,
        last_at=verified.envelopes[-1].observed_at if verified.envelopes else None,
        head_digest=None if completion is None else completion.head_digest,
        signature=verified.signature,
        signed_records=verified.signed_records,
        records=len(verified.envelopes),
        outcome=outcome,
        agents=agents,
    )


def _agent(participant: str, agents: dict[str, Transcript]) -> Transcript | None:
    kind, _, name = participant.partition(":")
    return agents.get(name) if kind == "agent" else None


def _call(event: dict[str, Any], at: str) -> ModelCall:
    return ModelCall(
        provider=event["provider"],
        model=event["model"],
        prompt_tokens=event["promptTokens"],
        completion_tokens=event["completionTokens"],
        cost_usd=event["costUsd"],
        latency_ms=event["latencyMs"],
        attempts=event["attempts"],
        observed_at=at,
    )
