"""A catalog's event classes as markdown field tables, generated from their JSON Schema.

The normative format document carries the core catalog's tables between markers
(``docs/ledger-format.md``, "Core events"), so a verifier written from it alone knows every field a
core event may and must have; a test holds the document equal to ``catalog_markdown``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ledger.events import EventCatalog

_DEFS = "#/$defs/"


def catalog_markdown(catalog: EventCatalog) -> str:
    """One table per event tag (sorted), then one per object type the events nest."""
    schema = catalog.json_schema()
    definitions: Mapping[str, Any] = schema.get("$defs", {})
    events = {
        definition["title"]: definition
        for definition in definitions.values()
        if "tag" in definition.get("properties", {})
    }
    nested = {name: d for name, d in definitions.items() if "tag" not in d.get("properties", {})}
    blocks = [_table(f"`{tag}`", events[tag], skip="tag") for tag in sorted(events)]
    blocks += [_table(f"object `{name}`", nested[name]) for name in sorted(nested)]
    return "\n".join(blocks)


def _table(heading: str, definition: Mapping[str, Any], *, skip: str | None = None) -> str:
    required = set(definition.get("required", []))
    rows = [f"#### {heading}", "", "| field | type | required |", "|---|---|---|"]
    for name, field in definition.get("properties", {}).items():
        if name == skip:
            continue
        default = f"no (default `{_json(field['default'])}`)" if "default" in field else "no"
        rows.append(f"| `{name}` | {_type(field)} | {'yes' if name in required else default} |")
    if len(rows) == 4:
        rows.append("| (none) | | |")
    return "\n".join(rows) + "\n"


def _type(schema: Mapping[str, Any]) -> str:
    """A schema as words: ``integer ≥ 0``, ``array of string``, ``string or null``, …"""
    if "$ref" in schema:
        return f"object `{str(schema['$ref']).removeprefix(_DEFS)}`"
    if "const" in schema:
        return f"`{_json(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{_json(value)}`" for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type(member) for member in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        text = "array" + (f" of {_type(items)}" if isinstance(items, Mapping) else "")
        return text + _bounds(schema, "minItems", "maxItems", "item")
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping):
            return f"object of {_type(values)}"
        return "object (any JSON values)"
    if kind in ("integer", "number"):
        return str(kind) + _limits(schema)
    if kind == "string":
        text = "string" + _bounds(schema, "minLength", "maxLength", "character")
        if "pattern" in schema:
            text += f" matching `{schema['pattern']}`".replace("|", "\\|")
        return text
    if isinstance(kind, str):
        return kind
    return "any JSON"


def _limits(schema: Mapping[str, Any]) -> str:
    marks = (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    )
    return "".join(f" {sign} {schema[key]}" for key, sign in marks if key in schema)


def _bounds(schema: Mapping[str, Any], low: str, high: str, unit: str) -> str:
    def count(key: str) -> str:
        return f"{schema[key]} {unit}{'s' * (schema[key] != 1)}"

    if low in schema and high in schema:
        return f" ({schema[low]} to {count(high)})"
    if low in schema:
        return f" (at least {count(low)})"
    if high in schema:
        return f" (at most {count(high)})"
    return ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True).replace("|", "\\|")
