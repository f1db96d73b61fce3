"""RunSpec definitions and module loading fail early, with a reason and a way forward."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest

from controller import Event, EventCatalog, RunSpec
from controller.agents import scripted
from controller.events.run import RunStarted
from controller.platforms.local import LocalPlatform
from controller.run import RunRequest, RunSpecError, execute_run, load_run_spec, new_run_id
from ledger import CatalogError


class Agreed(Event):
    tag: ClassVar[str] = "acme.agreed/v1"
    offer: str


async def program(ctx: Any) -> None:
    return None


def define(**changes: Any) -> RunSpec:
    fields: dict[str, Any] = {
        "id": "acme.test/v1",
        "events": [EventCatalog.make(Agreed)],
        "agents": {"alice": scripted()},
        "execute": program,
    }
    fields.update(changes)
    return RunSpec.define(**fields)


def test_a_definition_merges_its_catalogs_with_the_core_catalog() -> None:
    spec = define()
    assert "acme.agreed/v1" in spec.catalog and RunStarted in spec.catalog
    assert spec.events.tags == ["acme.agreed/v1"]
    assert list(spec.agents) == ["alice"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"id": "negotiation"}, "bad-id"),
        ({"id": "acme.negotiation/v0"}, "bad-id"),
        ({"agents": {"Alice": scripted()}}, "bad-roster-name"),
        ({"agents": {"a" * 64: scripted()}}, "bad-roster-name"),
        ({"agents": {"alice": object()}}, "bad-runtime"),
        ({"execute": lambda ctx: None}, "execute-not-async"),
    ],
)
def test_a_bad_definition_fails_when_defined(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(RunSpecError) as failure:
        define(**changes)
    assert failure.value.reason == reason


def test_duplicate_malformed_or_core_tags_fail_when_defined() -> None:
    class Twin(Event):
        tag: ClassVar[str] = "acme.agreed/v1"

    class Unversioned(Event):
        tag: ClassVar[str] = "acme.agreed"

    with pytest.raises(CatalogError) as duplicate:
        define(events=[EventCatalog.make(Agreed), Twin])
    assert duplicate.value.reason == "duplicate-tag"
    with pytest.raises(CatalogError) as malformed:
        define(events=[Unversioned])
    assert malformed.value.reason == "malformed-tag"
    with pytest.raises(CatalogError) as core:
        define(events=[RunStarted])
    assert core.value.reason == "core-event-in-customer-catalog"


HEADER = """\
from controller import RunSpec
from controller.agents import scripted

async def execute(ctx):
    return None
"""


@pytest.mark.parametrize(
    ("body", "reason", "says"),
    [
        ("x = 1\n", "no-run-spec", "defines no module-level 'run_spec'"),
        ("run_spec = 3\n", "no-run-spec", "not a RunSpec"),
        (
            "run_spec = RunSpec.define(id='acme.a/v1', agents={}, execute=execute)\n"
            "other = RunSpec.define(id='acme.b/v1', agents={}, execute=execute)\n",
            "multiple-run-specs",
            "defines 2 RunSpecs (other, run_spec)",
        ),
        ("run_spec = RunSpec.define(\n", "module-import-failed", "SyntaxError"),
        ("import no_such_module_here\n", "module-import-failed", "ModuleNotFoundError"),
        (
            "run_spec = RunSpec.define(id='acme.a/v1', agents={'Bob': scripted()}, "
            "execute=execute)\n",
            "bad-roster-name",
            "roster name 'Bob'",
        ),
    ],
)
def test_a_bad_module_fails_with_a_clear_error(
    tmp_path: Path, body: str, reason: str, says: str
) -> None:
    module = tmp_path / "experiment.py"
    module.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(RunSpecError) as failure:
        load_run_spec(module)
    assert failure.value.reason == reason
    assert says in str(failure.value)


def test_a_missing_module_fails_with_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunSpecError) as failure:
        load_run_spec(tmp_path / "absent.py")
    assert failure.value.reason == "module-not-found"


@pytest.mark.anyio
async def test_execute_run_refuses_a_bad_module_before_anything_starts(tmp_path: Path) -> None:
    module = tmp_path / "broken.py"
    module.write_text("run_spec = (\n")
    root = tmp_path / "artifacts"
    run_id = new_run_id()
    with pytest.raises(RunSpecError):
        await execute_run(
            RunRequest(module_path=str(module), run_id=run_id, artifact_root=str(root)),
            LocalPlatform(),
        )
    assert not (root / run_id).exists()


def test_a_run_request_checks_the_run_id() -> None:
    with pytest.raises(ValueError):
        RunRequest(module_path="m.py", run_id="sr-XYZ", artifact_root="/tmp")
    assert new_run_id().startswith("sr-") and len(new_run_id()) == 35


def test_the_examples_load() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    assert load_run_spec(examples / "negotiation.py").id == "acme.negotiation/v1"
    assert list(load_run_spec(examples / "partition.py").agents) == ["ann", "ben", "cat"]
