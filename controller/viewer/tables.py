"""A verified run, or every run of a suite, as rows of tables for pandas: one table per kind.

``messages`` (one row per committed message), ``deliveries`` (one per message and receiver
that acknowledged it), ``link_events`` (links down and up, policies set and cleared, deliveries
dropped, delayed or held), ``model_usage`` (one per model call the gateway recorded, failed calls
included), ``runs`` (one per run; a suite's with its slot, competitors, status and the grader's
output) and one table per own event tag of the experiment module (its fields as columns).
Every ledger is verified, and a run directory's harvested files re-hashed, before a row is made:
a ledger that does not verify raises its ``LedgerError`` and nothing is exported.
``table_files`` writes the rows as Parquet or CSV.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from controller.run.runid import RUN_ID_PATTERN
from controller.suites.definition import SuiteError
from controller.viewer.compare import verified_ledger
from ledger.format import RecordEnvelope
from ledger.run_artifacts import locate_ledger, require_run_artifacts
from ledger.verification import Verification

SUITE_FILE = "suite.json"
RUN_STARTED = "society.run-started/v1"
OPENED = "society.conversation-opened/v1"
COMMITTED = "society.router-message-committed/v1"
DELIVERED = "society.router-messages-delivered/v1"
DELIVERED_ONE = "society.router-message-delivered/v1"
"""What routers wrote before ``RouterMessagesDelivered``: one message per record."""
MODEL_USAGE = "society.agent-model-usage/v1"
MODEL_CALL_FAILED = "society.agent-model-call-failed/v1"
LINK_EVENTS = {
    "society.link-down/v1": "down",
    "society.link-up/v1": "up",
    "society.link-policy-set/v1": "policy-set",
    "society.link-policy-cleared/v1": "policy-cleared",
    "society.link-message-dropped/v1": "dropped",
    "society.link-message-delayed/v1": "delayed",
    "society.link-message-held/v1": "held",
}
OUTCOMES = frozenset(
    {"program-succeeded", "program-failed", "program-interrupted", "platform-failed"}
)
"""The program's outcome, named by its tag without ``society.`` and version (any version)."""
KERNEL_PREFIXES = ("society.", "ledger.")
"""Tags the kernel, the router and the shipped runtimes write; every other tag is the module's."""

RECORD = (("run_id", "string"), ("sequence", "int"), ("time", "time"), ("elapsed_s", "float"))
"""The columns every row of a record starts with: its run, ledger sequence, when it was written
(``observedAt``, UTC) and seconds since the run's ledger opened."""
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "messages": (
        *RECORD,
        ("router_sequence", "int"),
        ("message_id", "string"),
        ("conversation_id", "string"),
        ("sender", "string"),
        ("receivers", "strings"),
        ("text", "string"),
    ),
    "deliveries": (
        *RECORD,
        ("message_id", "string"),
        ("conversation_id", "string"),
        ("sender", "string"),
        ("receiver", "string"),
        ("latency_s", "float"),
    ),
    "link_events": (
        *RECORD,
        ("event", "string"),
        ("sender", "string"),
        ("receiver", "string"),
        ("message_id", "string"),
        ("conversation_id", "string"),
        ("reason", "string"),
        ("seconds", "float"),
        ("policy_id", "string"),
        ("description", "string"),
    ),
    "model_usage": (
        *RECORD,
        ("agent", "string"),
        ("provider", "string"),
        ("model", "string"),
        ("prompt_tokens", "int"),
        ("completion_tokens", "int"),
        ("cost_usd", "float"),
        ("latency_ms", "float"),
        ("attempts", "int"),
        ("failed", "bool"),
        ("error_class", "string"),
        ("status", "int"),
        ("detail", "string"),
    ),
}
"""The fixed tables and their columns (``table_files`` maps each kind to an Arrow type)."""
RUN_COLUMNS = (
    ("run_id", "string"),
    ("definition_id", "string"),
    ("seed", "int"),
    ("profile", "string"),
    ("roster", "strings"),
    ("outcome", "string"),
    ("records", "int"),
    ("signature", "string"),
    ("head_digest", "string"),
    ("started_at", "time"),
    ("duration_s", "float"),
)
SUITE_RUN_COLUMNS = (
    ("suite", "string"),
    ("slot", "string"),
    ("matchup", "string"),
    ("competitors", "strings"),
    ("status", "string"),
    ("reason", "string"),
    ("detail", "string"),
)
"""What a suite's ``runs`` rows add, from ``suite.json``; then ``parameters.*`` and ``result.*``
(the grader's output, flattened)."""
EVENT_COLUMNS = (*RECORD, ("producer", "string"), ("tag", "string"))
EVENT_REFERENCES = (("correlation_id", "string"), ("causation_id", "string"))
OWN_FIELD_PREFIX = "event."
"""An own event's field named like a record column gets this prefix."""


@dataclass(slots=True)
class Tables:
    """Rows of every table, in ledger order per run, runs in the order they were read."""

    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {name: [] for name in (*COLUMNS, "runs")}
    )
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each own tag's rows (a tag the manifest declares has a table, if empty)."""
    suite: dict[str, Any] | None = None
    """``{"suite": id, "resultField": name}`` for a suite, else ``None``."""

    def columns(self, table: str) -> tuple[tuple[str, str], ...]:
        """The fixed leading columns of ``table`` (a flattened table adds its own after them)."""
        if table == "runs":
            return (*RUN_COLUMNS, *(SUITE_RUN_COLUMNS if self.suite is not None else ()))
        if table in COLUMNS:
            return COLUMNS[table]
        return (*EVENT_COLUMNS, *EVENT_REFERENCES)


def read_tables(source: Path) -> Tables:
    """The tables of ``source``: a suite folder (it holds ``suite.json``), a run directory or a
    ledger directory. Raises ``LedgerError`` for the first ledger that does not verify, and
    ``SuiteError`` (``suite-json-invalid``) for a ``suite.json`` that is not a suite's."""
    tables = Tables()
    if (source / SUITE_FILE).is_file():
        _read_suite(source, tables)
    else:
        _read_run(source, tables, suite_row=None)
    return tables


def _read_suite(folder: Path, tables: Tables) -> None:
    document = _suite_document(folder / SUITE_FILE)
    result_field = document.get("grader", {}).get("result")
    tables.suite = {"suite": document.get("suite"), "resultField": result_field}
    for run in document["runs"]:
        competitors = [str(name) for name in run.get("competitors") or []]
        slot = str(run.get("slot", ""))
        suite_row: dict[str, Any] = {
            "suite": document.get("suite"),
            "slot": slot,
            "matchup": slot.rpartition("/seed-")[0] or ".".join(competitors),
            "competitors": competitors,
            "status": run.get("status"),
            "reason": run.get("reason"),
            "detail": run.get("detail"),
            "seed": run.get("seed"),
        }
        if isinstance(run.get("result"), Mapping):
            suite_row.update(flatten(run["result"], prefix="result."))
        run_id = run.get("runId")
        if run_id is None:  # the slot never ran: a row without a ledger
            tables.rows["runs"].append({"run_id": None, **suite_row})
            continue
        if not isinstance(run_id, str) or RUN_ID_PATTERN.match(run_id) is None:
            raise SuiteError(
                f"{folder / SUITE_FILE} names the run {run_id!r}, which is not a run id",
                reason="suite-json-invalid",
                next_step="export the suite folder `society suite run` wrote, or check it with "
                "`society suite verify SUITE_DIR --suite SUITE.py`",
            )
        _read_run(folder / "runs" / run_id, tables, suite_row=suite_row)


def _suite_document(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        document = None
    if not (
        isinstance(document, dict)
        and isinstance(document.get("runs"), list)
        and all(isinstance(run, dict) for run in document["runs"])
        and isinstance(document.get("grader", {}), dict)
    ):
        raise SuiteError(
            f"{path} is not a suite's report (a JSON object with a list of runs)",
            reason="suite-json-invalid",
            next_step="pass the folder `society suite run` wrote (DIR/<suite id>/), or a run "
            "directory",
        )
    return document


def _read_run(path: Path, tables: Tables, *, suite_row: dict[str, Any] | None) -> None:
    ledger_dir, run_dir = locate_ledger(path)
    verified = verified_ledger(ledger_dir)
    if run_dir is not None:
        require_run_artifacts(run_dir, verified.envelopes)
    reader = _RunReader(verified, tables)
    reader.read()
    tables.rows["runs"].append({**(suite_row or {}), **reader.run_row()})


class _RunReader:
    """One pass over a verified ledger's records, appending each table's rows."""

    def __init__(self, verified: Verification, tables: Tables) -> None:
        self.verified = verified
        self.tables = tables
        self.run_id = verified.manifest.run_id
        self.started: dict[str, Any] = {}
        self.outcome: str | None = None
        self.participants: dict[str, list[str]] = {}
        self.committed: dict[str, tuple[str, str, float]] = {}
        """message id -> (conversation id, sender, elapsed seconds)"""
        metadata = verified.manifest.metadata
        runtime_tags = {
            tag
            for tags in (metadata.get("runtimeCatalogs") or {}).values()
            if isinstance(tags, list)
            for tag in tags
        }
        self.own = {
            tag
            for tag in verified.manifest.catalog_tags
            if not tag.startswith(KERNEL_PREFIXES) and tag not in runtime_tags
        }
        for tag in sorted(self.own):
            tables.events.setdefault(tag, [])

    def read(self) -> None:
        rows = self.tables.rows
        for envelope in self.verified.envelopes:
            tag, event = envelope.tag, envelope.event
            record = {
                "run_id": self.run_id,
                "sequence": envelope.logical_sequence,
                "time": _time(envelope.observed_at),
                "elapsed_s": envelope.elapsed_nanos / 1e9,
            }
            if tag == RUN_STARTED:
                self.started = event
            elif tag == OPENED:
                self.participants[event["conversationId"]] = list(event["participants"])
            elif tag == COMMITTED:
                rows["messages"].append(self._message(record, event))
            elif tag in (DELIVERED, DELIVERED_ONE):
                rows["deliveries"].extend(self._deliveries(record, event))
            elif tag in LINK_EVENTS:
                rows["link_events"].append(self._link_event(record, tag, event))
            elif tag in (MODEL_USAGE, MODEL_CALL_FAILED):
                rows["model_usage"].append(_model_call(record, tag, event))
            elif tag.startswith("society.") and _name(tag) in OUTCOMES:
                self.outcome = _name(tag)
            elif tag in self.own:
                self.tables.events[tag].append(_own_event(record, envelope))

    def _message(self, record: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        conversation, sender = event["conversationId"], event["senderId"]
        self.committed[event["messageId"]] = (conversation, sender, record["elapsed_s"])
        return {
            **record,
            "router_sequence": event["routerSequence"],
            "message_id": event["messageId"],
            "conversation_id": conversation,
            "sender": sender,
            "receivers": [p for p in self.participants.get(conversation, []) if p != sender],
            "text": "\n".join(event["parts"]),
        }

    def _deliveries(
        self, record: dict[str, Any], event: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        ids = event["messageIds"] if "messageIds" in event else [event["messageId"]]
        for message_id in ids:
            conversation, sender, sent = self.committed.get(message_id, (None, None, None))
            yield {
                **record,
                "message_id": message_id,
                "conversation_id": conversation,
                "sender": sender,
                "receiver": event["receiverId"],
                "latency_s": None if sent is None else record["elapsed_s"] - sent,
            }

    def _link_event(
        self, record: dict[str, Any], tag: str, event: dict[str, Any]
    ) -> dict[str, Any]:
        message_id = event.get("messageId")
        committed = self.committed.get(message_id) if message_id is not None else None
        return {
            **record,
            "event": LINK_EVENTS[tag],
            "sender": event["senderId"],
            "receiver": event["receiverId"],
            "message_id": message_id,
            "conversation_id": committed[0] if committed is not None else None,
            "reason": event.get("reason"),
            "seconds": event.get("totalSeconds"),
            "policy_id": event.get("policyId"),
            "description": event.get("description"),
        }

    def run_row(self) -> dict[str, Any]:
        """The run's row as its ledger says (a suite's row adds what suite.json says)."""
        envelopes = self.verified.envelopes
        completion = self.verified.completion
        row: dict[str, Any] = {
            "run_id": self.run_id,
            "definition_id": self.verified.manifest.definition_id,
            "seed": self.started.get("seed"),
            "profile": self.started.get("profile"),
            "roster": list(self.started.get("roster", [])),
            "outcome": self.outcome,
            "records": len(envelopes),
            "signature": self.verified.signature,
            "head_digest": None if completion is None else completion.head_digest,
            "started_at": _time(envelopes[0].observed_at) if envelopes else None,
            "duration_s": envelopes[-1].elapsed_nanos / 1e9 if envelopes else None,
        }
        if isinstance(self.started.get("parameters"), Mapping):
            row.update(flatten(self.started["parameters"], prefix="parameters."))
        return row


def _model_call(record: dict[str, Any], tag: str, event: dict[str, Any]) -> dict[str, Any]:
    failed = tag == MODEL_CALL_FAILED
    return {
        **record,
        "agent": event["agent"],
        "provider": event["provider"],
        "model": event["model"],
        "prompt_tokens": event.get("promptTokens"),
        "completion_tokens": event.get("completionTokens"),
        "cost_usd": event.get("costUsd"),
        "latency_ms": event["latencyMs"],
        "attempts": event["attempts"],
        "failed": failed,
        "error_class": event.get("errorClass"),
        "status": event.get("status"),
        "detail": event.get("detail"),
    }


def _own_event(record: dict[str, Any], envelope: RecordEnvelope) -> dict[str, Any]:
    """An own event's row: its fields as the module's class names them (``proposed_by``), a
    nested object's keys after a dot as recorded (``shares.fair``)."""
    row = {
        **record,
        "producer": envelope.producer,
        "tag": envelope.tag,
        "correlation_id": envelope.correlation_id,
        "causation_id": envelope.causation_id,
    }
    fields = {_python_name(key): value for key, value in envelope.event.items() if key != "tag"}
    for name, value in flatten(fields).items():
        row[OWN_FIELD_PREFIX + name if name in row else name] = value
    return row


def flatten(value: Mapping[str, Any], *, prefix: str = "") -> dict[str, Any]:
    """A nested object as one level, keys joined with ``.`` (``pandas.json_normalize``'s way);
    lists stay values, an empty object is ``None``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(flatten(item, prefix=name + "."))
        else:
            flat[name] = None if isinstance(item, Mapping) else item
    return flat


def _python_name(wire: str) -> str:
    """The field's Python name: the ledger writes ``to_camel(name)``, which this undoes."""
    return re.sub(r"[A-Z]", lambda upper: "_" + upper.group(0).lower(), wire)


def _name(tag: str) -> str:
    return tag.removeprefix("society.").partition("/")[0]


def _time(observed_at: str) -> datetime:
    return datetime.fromisoformat(observed_at)
