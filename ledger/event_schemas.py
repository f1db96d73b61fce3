"""Event shapes frozen under their tags: one committed JSON Schema per versioned tag.

A tag names a persisted shape: ``acme.offer-made/v1`` means the same fields in every ledger that
uses it. ``DIR/<tag with "/" as ".">.schema.json`` holds the schema its class had when the tag
was first exported. A later schema for the same tag may only widen it (an optional field, a
wider type: ``ledger.schemas.breaking_changes``); a removed or retyped field or a new required one
needs a new tag (``/v2``), whose file is frozen beside the old one. Regenerating never rewrites a
file with a breaking change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.events import Event, EventCatalog
from ledger.schemas import breaking_changes

SUFFIX = ".schema.json"


@dataclass(frozen=True, slots=True)
class EventSchemaProblem:
    """Why one tag's committed schema does not match its class."""

    tag: str
    path: Path
    breaking: bool
    """True: the change needs a new tag; False: regenerate the file and commit it."""
    detail: str

    def __str__(self) -> str:
        return self.detail


def schema_path(directory: Path, tag: str) -> Path:
    """``DIR/acme.offer-made.v1.schema.json`` for ``acme.offer-made/v1``."""
    return directory / (tag.replace("/", ".") + SUFFIX)


def event_schema(event_class: type[Event]) -> dict[str, Any]:
    """The JSON Schema (2020-12) of one event class's wire object, tag included; docstrings are
    left out (prose is not shape: editing one needs no new export)."""
    schema: dict[str, Any] = _without_descriptions(EventCatalog.make(event_class).json_schema())
    schema["title"] = event_class.tag
    schema["$id"] = f"urn:society-runner:event:{event_class.tag}"
    return schema


def _without_descriptions(value: Any, *, names: bool = False) -> Any:
    """``value`` without schema ``description`` keywords; ``names``: a mapping of property or
    definition names, whose keys are kept whatever they are called."""
    if isinstance(value, list):
        return [_without_descriptions(item) for item in value]
    if not isinstance(value, dict):
        return value
    return {
        key: _without_descriptions(item, names=not names and key in ("properties", "$defs"))
        for key, item in value.items()
        if names or key != "description"
    }


def _document(schema: dict[str, Any]) -> bytes:
    return (json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _classes(catalogs: Iterable[EventCatalog]) -> dict[str, type[Event]]:
    merged: dict[str, type[Event]] = {}
    for catalog in catalogs:
        for tag, event_class in catalog.items():
            merged.setdefault(tag, event_class)
    return dict(sorted(merged.items()))


def check_event_schemas(
    catalogs: Iterable[EventCatalog], directory: Path
) -> list[EventSchemaProblem]:
    """Every tag whose committed schema is missing, differs (regenerate) or is broken by its
    class (new tag needed); empty when all match."""
    problems = []
    for tag, event_class in _classes(catalogs).items():
        problem = _problem(tag, event_class, directory)
        if problem is not None:
            problems.append(problem)
    return problems


def _problem(tag: str, event_class: type[Event], directory: Path) -> EventSchemaProblem | None:
    path = schema_path(directory, tag)
    data = _document(event_schema(event_class))
    try:
        committed = path.read_bytes()
    except FileNotFoundError:
        return EventSchemaProblem(
            tag, path, False, f"{path} is missing: export the schema of {tag} and commit it"
        )
    if committed == data:
        return None
    try:
        frozen = json.loads(committed)
    except ValueError:
        return EventSchemaProblem(tag, path, True, f"{path} is not JSON; restore it from history")
    changes = breaking_changes(frozen, json.loads(data))
    if changes:
        return EventSchemaProblem(
            tag,
            path,
            True,
            f"{tag}: breaking change under the same tag ({'; '.join(changes)}): a ledger "
            f"written with {tag} would no longer mean what it meant; give the changed class a "
            f"new tag (/v{_next_version(tag)}) and keep the old one, or make the change compatible",
        )
    return EventSchemaProblem(
        tag, path, False, f"{path} differs (compatibly) from its class: export it again and commit"
    )


def export_event_schemas(
    catalogs: Iterable[EventCatalog], directory: Path
) -> tuple[list[Path], list[EventSchemaProblem]]:
    """Write each tag's schema where it is missing or changed compatibly; a breaking change is
    refused (returned, nothing written for that tag)."""
    written, refused = [], []
    for tag, event_class in _classes(catalogs).items():
        problem = _problem(tag, event_class, directory)
        if problem is None:
            continue
        if problem.breaking:
            refused.append(problem)
            continue
        problem.path.parent.mkdir(parents=True, exist_ok=True)
        problem.path.write_bytes(_document(event_schema(event_class)))
        written.append(problem.path)
    return written, refused


def _next_version(tag: str) -> int:
    return int(tag.rsplit("/v", 1)[1]) + 1
