"""JSON Schemas of the ledger files, and the small rule that says when a schema change breaks.

A change is **breaking** when a reader written for the old schema, or a document valid under it,
can fail under the new one: a removed (or renamed) field, a new required field, or a narrowed
type (a JSON type, an enum value or a ``const`` that the old schema allowed and the new one does
not; ``additionalProperties`` turned off). Adding an optional field, or widening, is compatible.
A breaking change must move its format version.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ledger.format import LEDGER_FORMAT_VERSION, Completion, Manifest, RecordEnvelope
from ledger.records import ledger_catalog

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _model_schema(model: Any, title: str) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema(by_alias=True, mode="serialization")
    schema.update({"$schema": DRAFT, "title": title, "additionalProperties": False})
    return schema


def ledger_schemas() -> dict[str, tuple[dict[str, Any], int]]:
    """``name -> (schema, format version)`` for manifest.json, a records.ndjson line, the
    checkpoint event, and completion.json."""
    checkpoint = ledger_catalog.json_schema()
    checkpoint["title"] = "ledger.checkpoint/v1 (the event of a checkpoint record)"
    return {
        "ledger-manifest": (_model_schema(Manifest, "manifest.json"), LEDGER_FORMAT_VERSION),
        "ledger-record-envelope": (
            _model_schema(RecordEnvelope, "one line of records.ndjson"),
            LEDGER_FORMAT_VERSION,
        ),
        "ledger-checkpoint": (checkpoint, LEDGER_FORMAT_VERSION),
        "ledger-completion": (_model_schema(Completion, "completion.json"), LEDGER_FORMAT_VERSION),
    }


def breaking_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Every way ``new`` breaks documents or readers of ``old`` (empty: compatible)."""
    found = list(_compare(old, new, "#", old, new))
    old_defs, new_defs = old.get("$defs", {}), new.get("$defs", {})
    for name, definition in old_defs.items():
        if name not in new_defs:
            found.append(f"#/$defs/{name}: removed")
        else:
            found += _compare(definition, new_defs[name], f"#/$defs/{name}", old, new)
    return sorted(set(found))


def _resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    seen = 0
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and seen < 32:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return schema
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        schema, seen = target, seen + 1
    return schema


def _types(schema: Any, root: Mapping[str, Any]) -> set[str] | None:
    """The JSON types a schema admits; None when it does not say (anything)."""
    schema = _resolve(schema, root)
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("type")
    if isinstance(declared, str | list):
        named = {declared} if isinstance(declared, str) else set(declared)
        return named | {"integer"} if "number" in named else named  # a number may be an integer
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            found: set[str] = set()
            for member in schema[key]:
                member_types = _types(member, root)
                if member_types is None:
                    return None
                found |= member_types
            return found
    if "const" in schema or "enum" in schema:
        values = schema.get("enum", [schema.get("const")])
        return {_json_type(value) for value in values}
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _compare(
    old: Any, new: Any, where: str, old_root: Mapping[str, Any], new_root: Mapping[str, Any]
) -> Iterator[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping) and old.get("$ref") == new.get("$ref"):
        if old.get("$ref") is not None:
            return  # the same definition: compared once, by name, in breaking_changes
    old, new = _resolve(old, old_root), _resolve(new, new_root)
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return
    old_types, new_types = _types(old, old_root), _types(new, new_root)
    if old_types is None and new_types is not None:
        yield f"{where}: now only {sorted(new_types)}, was any type"
    elif old_types is not None and new_types is not None and old_types - new_types:
        yield f"{where}: type narrowed from {sorted(old_types)} to {sorted(new_types)}"
    old_values = _values(old)
    new_values = _values(new)
    if new_values is not None and (old_values is None or old_values - new_values):
        yield f"{where}: allowed values narrowed to {sorted(map(repr, new_values))}"
    if (
        old.get("additionalProperties", True) is not False
        and new.get("additionalProperties") is False
    ):
        yield f"{where}: additional properties are now refused"
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name in old_props:
        if name not in new_props:
            yield f"{where}/properties/{name}: removed (or renamed)"
        else:
            yield from _compare(
                old_props[name], new_props[name], f"{where}/properties/{name}", old_root, new_root
            )
    for name in sorted(set(new.get("required", [])) - set(old.get("required", []))):
        yield f"{where}/required: {name} is newly required"
    if "items" in old and "items" in new:
        yield from _compare(old["items"], new["items"], f"{where}/items", old_root, new_root)
    for key in ("anyOf", "oneOf"):
        old_refs = {m.get("$ref") for m in old.get(key, []) if isinstance(m, Mapping)}
        new_refs = {m.get("$ref") for m in new.get(key, []) if isinstance(m, Mapping)}
        for ref in sorted(r for r in old_refs - new_refs if isinstance(r, str)):
            yield f"{where}/{key}: the alternative {ref} was removed"


def _values(schema: Mapping[str, Any]) -> set[Any] | None:
    if "const" in schema:
        return {_hashable(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {_hashable(value) for value in schema["enum"]}
    return None


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else repr(value)
