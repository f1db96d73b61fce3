"""Every ``reason`` that verifying a ledger can report, each with its one-line meaning."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

VERIFICATION_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "manifest-missing": "manifest.json does not exist or cannot be read",
        "manifest-invalid": "manifest.json is not JSON, nests deeper than 200, or breaks its "
        "schema (unknown fields, unsorted catalogTags, a publicKey not in `ed25519:<base64>` form)",
        "duplicate-key": "an object in manifest.json, completion.json or a record line names "
        "the same key twice (two parsers could read different values)",
        "non-canonical-json": "manifest.json, completion.json or a record line is JSON but not "
        "its canonical byte form",
        "format-unsupported": "a ledgerFormatVersion this reader does not understand",
        "definition-mismatch": "the manifest's definitionId is not the expected one",
        "catalog-mismatch": "the reader's catalog lacks a tag the manifest declares "
        "(or, with strict_catalog, is not exactly the manifest's)",
        "key-not-trusted": "the manifest names a public key other than the pinned trusted key",
        "incomplete": "completion.json is missing: the writer never finished "
        "(crash or still running)",
        "completion-invalid": "completion.json is not JSON, nests deeper than 200, or breaks its "
        "schema",
        "run-id-mismatch": "a record or completion.json carries a run id other than the manifest's",
        "records-missing": "records.ndjson does not exist or cannot be read",
        "record-invalid": "a record line is not JSON, nests deeper than 200, or breaks the "
        "envelope schema",
        "sequence-gap": "a record's logicalSequence is not its position: a record was deleted, "
        "duplicated or moved",
        "duplicate-event-id": "a record repeats the eventId of an earlier record",
        "event-id-invalid": "a record's eventId is not `<runId>:<logicalSequence>`",
        "elapsed-decreasing": "a record's elapsedNanos is negative or below the one before it",
        "observed-at-invalid": "a record's observedAt is not a UTC time written "
        "`2025-01-31T12:00:00.123456Z`",
        "manifest-digest-mismatch": "record 0's prevDigest or completion's manifestSha256 is not "
        "the SHA-256 of manifest.json",
        "chain-broken": "a record's prevDigest is not the SHA-256 of the line before it",
        "undeclared-tag": "a record's event tag is not in the manifest's catalogTags",
        "event-invalid": "an event does not validate strictly against its class (no coercion)",
        "checkpoint-producer-invalid": "a checkpoint record's producer is not `ledger`",
        "checkpoint-mismatch": "a checkpoint's recordCount or headDigest does not describe the "
        "records before it",
        "checkpoint-signature-invalid": "a checkpoint's signature does not verify",
        "torn-tail": "the last line of records.ndjson is cut off (no trailing newline)",
        "record-count-mismatch": "completion's recordCount is not the number of records",
        "head-digest-mismatch": "completion's headDigest is not the SHA-256 of the last record "
        "line",
        "records-digest-mismatch": "completion's recordsSha256 is not the SHA-256 of "
        "records.ndjson",
        "signature-invalid": "completion.json's signature does not verify",
        "receipt-mismatch": "the ledger verifies but is not the one the given receipt (a run's "
        "result line) names: its run id, record count, head digest, public key or completeness "
        "differs",
    }
)
"""What is wrong with the ledger: ``LedgerVerificationError.reason`` is always one of these."""

RUN_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "run-layout-invalid": "a run directory (one holding `ledger/` or `artifacts/`) keeps "
        "ledger files at its top level, lacks a `ledger/` folder, or links its ledger from "
        "elsewhere; its ledger lives only under `ledger/<ref>/`",
        "run-ledger-ambiguous": "a run directory holds no ledger or several under `ledger/` and "
        "none is `main`; pass the ledger directory itself",
        "artifact-path-invalid": "a record claims an artifact whose path is not a plain relative "
        "path under the run's `artifacts/`",
        "artifact-missing": "a harvested file or log the ledger recorded by digest is not in the "
        "run directory (or is not a regular file)",
        "artifact-changed": "a harvested file or log no longer has the SHA-256 (or size) the "
        "ledger recorded",
        "artifact-extra": "a file in the run's `artifacts/` that no record claims",
    }
)
"""What is wrong with a run directory's harvested artifacts, checked after its ledger verified
(``society ledger verify RUN_DIR``, ``society grade GRADER.py RUN_DIR``)."""

INPUT_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "receipt-invalid": "the --receipt is not a readable result line with runId, records, "
        "headDigest, publicKey and receipt",
        "trusted-key-unreadable": "the --trusted-key file cannot be read or holds an unusable "
        "private key",
        "bad-public-key": "the trusted key is not an Ed25519 public key "
        "(`ed25519:<base64>` or PEM)",
        "module-unloadable": "the --catalog (or grader) module is not a file or fails to import",
        "catalog-not-found": "the module defines neither `catalog` nor `run_spec.catalog`",
        "catalog-invalid": "the module's catalog cannot be merged with the core events "
        "(a tag used twice)",
    }
)
"""What is wrong with what was passed to the verifier, not with the ledger."""


def verification_reasons() -> Mapping[str, str]:
    """Every reason ``society ledger verify`` can print: ledger checks first, in check order,
    then a run directory's artifact checks, then what is wrong with the input."""
    return MappingProxyType({**VERIFICATION_REASONS, **RUN_REASONS, **INPUT_REASONS})


def reasons_markdown() -> str:
    """The reasons as a markdown table (docs/ledger.md and the README carry it verbatim)."""
    rows = ["| reason | what is wrong | where |", "|---|---|---|"]
    rows += [
        f"| `{reason}` | {meaning} | ledger |" for reason, meaning in VERIFICATION_REASONS.items()
    ]
    rows += [f"| `{reason}` | {meaning} | run |" for reason, meaning in RUN_REASONS.items()]
    rows += [f"| `{reason}` | {meaning} | input |" for reason, meaning in INPUT_REASONS.items()]
    return "\n".join(rows) + "\n"
