"""The committed JSON Schemas under ``schemas/``: export them, and check them against the code.

``schemas/<name>.schema.json`` is the code's schema now. ``schemas/frozen/<name>.v<N>.schema.json``
is the schema as it stood when format version N was first exported; it is never rewritten. The
check fails when a current file differs from the code (regenerate it) or when the code's schema
breaks the frozen one of the same version (``ledger.schemas.breaking_changes``: move the version).
``schemas/events/<tag>.schema.json`` freezes each event shape (core, shipped runtimes, examples)
under its tag the same way (``ledger.event_schemas``): a breaking change needs a new tag.

    society ledger schemas [--check] [--out DIR]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from ledger.event_schemas import EventSchemaProblem, check_event_schemas, export_event_schemas
from ledger.event_tables import CORE, RUNTIMES, between_markers, catalog_markdown, with_tables
from ledger.events import Event, EventCatalog
from ledger.grading import load_module
from ledger.schemas import DRAFT, breaking_changes, ledger_schemas

RESULT_LINE_VERSION = 3
"""Version of ``society run``'s JSON result line; move it with any breaking change to it."""

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"
FROZEN = "frozen"
EVENTS = "events"
"""``schemas/events/<tag>.schema.json``: each persisted event shape, frozen under its tag."""
EXAMPLES_DIR = SCHEMAS_DIR.parent / "examples"
FORMAT_DOC = SCHEMAS_DIR.parent / "docs" / "ledger-format.md"
"""The normative format document: its core events' field tables are generated."""


class ResultLine(BaseModel):
    """The one JSON line ``society run`` prints on stdout (``RunReport.line()``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    outcome: Literal["ProgramFinished", "PlatformLost", "Interrupted"]
    exit: Literal["success", "failure", "interrupted"]
    runId: str | None
    ledger: str | None
    receipt: Literal["complete", "incomplete"]
    records: int
    publicKey: str | None
    usage: dict[str, Any] | None
    """Model tokens and cost per agent and in total; null without a model-using agent."""
    headDigest: str | None = None
    """SHA-256 of the ledger's last record line (the receipt `ledger verify --receipt` checks)."""
    value: JsonValue = None
    """What the program returned, as JSON, when it returned something it could keep."""
    valueNote: str | None = None
    """Why the program's value was not kept (not JSON data, or over 64 KiB of JSON)."""


def code_schemas() -> dict[str, tuple[dict[str, Any], int]]:
    """``name -> (schema, version)`` for every exported format, generated from the code now."""
    from society_sandbox.network.protocol import PROTOCOL_VERSION, protocol_json_schema

    result_line = ResultLine.model_json_schema(by_alias=True)
    result_line.update({"$schema": DRAFT, "title": "society run result line"})
    return {
        **ledger_schemas(),
        "run-result-line": (result_line, RESULT_LINE_VERSION),
        "wire-protocol": (protocol_json_schema(), PROTOCOL_VERSION),
    }


def event_catalogs(examples: Path = EXAMPLES_DIR) -> list[EventCatalog]:
    """The core events, every shipped runtime's, and every catalog the examples define."""
    from controller.agents.shipped import shipped_runtime_catalogs
    from controller.events import core_events

    return [core_events, *shipped_runtime_catalogs().values(), *example_catalogs(examples)]


def example_catalogs(examples: Path = EXAMPLES_DIR) -> list[EventCatalog]:
    """Each example module's ``run_spec.catalog``, its module-level catalogs and event classes."""
    catalogs = []
    for path in sorted(examples.glob("*.py")):
        module = load_module(path)
        spec_catalog = getattr(getattr(module, "run_spec", None), "catalog", None)
        found = [value for value in vars(module).values() if isinstance(value, EventCatalog)]
        classes = [
            value
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Event) and "tag" in vars(value)
        ]
        if isinstance(spec_catalog, EventCatalog):
            found.append(spec_catalog)
        catalogs += [*found, EventCatalog.make(*classes)]
    return catalogs


def export_event_files(
    directory: Path = SCHEMAS_DIR, catalogs: list[EventCatalog] | None = None
) -> tuple[list[Path], list[EventSchemaProblem]]:
    """Write ``directory/events/``; a breaking change under a tag is refused, not written."""
    return export_event_schemas(catalogs or event_catalogs(), directory / EVENTS)


def check_event_files(
    directory: Path = SCHEMAS_DIR, catalogs: list[EventCatalog] | None = None
) -> list[str]:
    return [str(p) for p in check_event_schemas(catalogs or event_catalogs(), directory / EVENTS)]


def event_tables() -> dict[str, str]:
    """The format document's generated blocks: the core events' and the shipped runtimes'."""
    from controller.agents.shipped import shipped_runtime_catalogs
    from controller.events import core_events

    runtimes = EventCatalog.merge(*shipped_runtime_catalogs().values())
    return {CORE: catalog_markdown(core_events), RUNTIMES: catalog_markdown(runtimes)}


def export_format_doc(path: Path = FORMAT_DOC) -> Path | None:
    """Rewrite the event tables in the format document; the path when it changed."""
    text = path.read_text(encoding="utf-8")
    updated = text
    for block, tables in event_tables().items():
        updated = with_tables(updated, tables, block)
    if updated == text:
        return None
    path.write_text(updated, encoding="utf-8")
    return path


def check_format_doc(path: Path = FORMAT_DOC) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [
        f"{path}: the {block} tables differ from the code: run `society ledger schemas`"
        for block, tables in event_tables().items()
        if between_markers(text, block) != tables
    ]


def _document(name: str, schema: dict[str, Any], version: int) -> bytes:
    document = {**schema, "$id": f"urn:society-runner:schema:{name}:v{version}"}
    document["x-format-version"] = version
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def current_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.schema.json"


def frozen_path(directory: Path, name: str, version: int) -> Path:
    return directory / FROZEN / f"{name}.v{version}.schema.json"


def export_schemas(
    directory: Path = SCHEMAS_DIR, schemas: dict[str, tuple[dict[str, Any], int]] | None = None
) -> list[Path]:
    """Write every current schema, and the frozen one of each version not frozen yet."""
    written = []
    for name, (schema, version) in (schemas or code_schemas()).items():
        data = _document(name, schema, version)
        paths = [current_path(directory, name)]
        if not frozen_path(directory, name, version).exists():
            paths.append(frozen_path(directory, name, version))
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_bytes() != data:
                path.write_bytes(data)
                written.append(path)
    return written


def check_schemas(
    directory: Path = SCHEMAS_DIR,
    schemas: dict[str, tuple[dict[str, Any], int]] | None = None,
) -> list[str]:
    """Every problem with the committed schemas (empty: they match the code, compatibly)."""
    problems = []
    for name, (schema, version) in (schemas or code_schemas()).items():
        data = _document(name, schema, version)
        current = current_path(directory, name)
        if not current.exists() or current.read_bytes() != data:
            problems.append(
                f"{current} differs from the code's schema: run `society ledger schemas` and "
                f"commit the result"
            )
        frozen = frozen_path(directory, name, version)
        if not frozen.exists():
            problems.append(
                f"{frozen} is missing: run `society ledger schemas` to freeze v{version}"
            )
            continue
        for change in breaking_changes(json.loads(frozen.read_bytes()), json.loads(data)):
            problems.append(
                f"{name}: breaking change without a new format version (still v{version}): "
                f"{change}; move the version, or make the change compatible"
            )
    if schemas is None:
        problems += check_event_files(directory)
    return problems
