"""The committed JSON Schemas under schemas/ equal the code's, and change only compatibly unless
their format version moves."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from controller.cli.schema_export import (
    SCHEMAS_DIR,
    ResultLine,
    check_schemas,
    code_schemas,
    export_schemas,
    frozen_path,
)
from controller.lifecycle.driver import RunReport
from ledger.format import Manifest
from ledger.schemas import breaking_changes, ledger_schemas

Schemas = dict[str, tuple[dict[str, Any], int]]


def test_the_committed_schemas_equal_the_code() -> None:
    assert check_schemas() == []
    assert sorted(path.name for path in SCHEMAS_DIR.glob("*.schema.json")) == [
        "ledger-checkpoint.schema.json",
        "ledger-completion.schema.json",
        "ledger-manifest.schema.json",
        "ledger-record-envelope.schema.json",
        "run-result-line.schema.json",
        "wire-protocol.schema.json",
    ]


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    copy_dir = tmp_path / "schemas"
    shutil.copytree(SCHEMAS_DIR, copy_dir)
    return copy_dir


def _changed(edit: Any, name: str = "ledger-manifest", version: int | None = None) -> Schemas:
    schemas = copy.deepcopy(code_schemas())
    schema, old_version = schemas[name]
    edit(schema)
    schemas[name] = (schema, old_version if version is None else version)
    return schemas


def _add_optional(schema: dict[str, Any]) -> None:
    schema["properties"]["comment"] = {"type": "string"}


def _remove_created_at(schema: dict[str, Any]) -> None:
    del schema["properties"]["createdAt"]
    schema["required"].remove("createdAt")


def test_a_code_change_without_regenerating_fails(committed: Path) -> None:
    schemas = _changed(_add_optional)
    (problem,) = check_schemas(committed, schemas)
    assert "ledger-manifest.schema.json differs from the code" in problem
    export_schemas(committed, schemas)  # regenerated: a compatible change passes
    assert check_schemas(committed, schemas) == []


def test_a_breaking_change_must_move_the_format_version(committed: Path) -> None:
    schemas = _changed(_remove_created_at)
    export_schemas(committed, schemas)
    problems = check_schemas(committed, schemas)
    assert problems and all("without a new format version" in p for p in problems), problems
    assert any("createdAt: removed" in p for p in problems)

    moved = _changed(_remove_created_at, version=2)
    export_schemas(committed, moved)
    assert check_schemas(committed, moved) == []
    assert frozen_path(committed, "ledger-manifest", 1).exists()  # the old version stays frozen


def test_a_new_required_field_in_a_real_model_is_breaking() -> None:
    class ManifestWithOwner(Manifest):
        owner: str

    frozen = json.loads(frozen_path(SCHEMAS_DIR, "ledger-manifest", 1).read_bytes())
    schema = ManifestWithOwner.model_json_schema(by_alias=True, mode="serialization")
    assert "#/required: owner is newly required" in breaking_changes(frozen, schema)
    current, _ = ledger_schemas()["ledger-manifest"]
    assert breaking_changes(frozen, current) == []


A_STR = {"properties": {"a": {"type": "string"}}}
A_STR_OR_NULL = {"properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
A_XY = {"properties": {"a": {"enum": ["x", "y"]}}}
A_X = {"properties": {"a": {"enum": ["x"]}}}
A_NUMBER = {"properties": {"a": {"type": "number"}}}
A_INTEGER = {"properties": {"a": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("old", "new", "breaking"),
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}},
         {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
         False),
        ({"type": "object", "properties": {"a": {"type": "string"}}},
         {"type": "object", "properties": {"b": {"type": "string"}}}, True),
        ({"type": "object", "properties": {"a": {"type": "string"}}},
         {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, True),
        (A_STR_OR_NULL, A_STR, True),
        (A_STR, A_STR_OR_NULL, False),
        (A_XY, A_X, True),
        (A_X, A_XY, False),
        (A_NUMBER, A_INTEGER, True),
        (A_INTEGER, A_NUMBER, False),
        ({"type": "object"}, {"type": "object", "additionalProperties": False}, True),
        ({"oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}], "$defs": {"A": {}, "B": {}}},
         {"oneOf": [{"$ref": "#/$defs/A"}], "$defs": {"A": {}}}, True),
        ({"$defs": {"A": {"properties": {"x": {"type": "string"}}}}},
         {"$defs": {"A": {"properties": {"y": {"type": "string"}}}}}, True),
    ],
)  # fmt: skip
def test_the_compatibility_rule(old: dict[str, Any], new: dict[str, Any], breaking: bool) -> None:
    assert bool(breaking_changes(old, new)) is breaking, breaking_changes(old, new)


def test_the_result_line_schema_describes_what_society_run_prints() -> None:
    lines = [
        RunReport("ProgramFinished", "success", "sr-" + "a" * 32, "/x", True, 9, "ed25519:AA"),
        RunReport("PlatformLost", "failure", "sr-" + "b" * 32, "/y", False, 3, "ed25519:AA",
                  cause="c", usage={"total": {"costUsd": None}}),
        RunReport("Interrupted", "interrupted", None, None, False, 0, None),
    ]  # fmt: skip
    for report in lines:
        line = json.loads(json.dumps(report.line()))
        assert set(line) == set(ResultLine.model_fields)
        ResultLine.model_validate(line)


def test_the_wire_protocol_schema_names_every_frame() -> None:
    schema, version = code_schemas()["wire-protocol"]
    frames = schema["$defs"]
    assert version == 1 and {"Authenticate", "SendMessage", "DeliveryFrame"} <= set(frames)
