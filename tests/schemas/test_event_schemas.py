"""Event shapes cannot drift under a tag: schemas/events/ holds every core, shipped-runtime and
example event class's JSON Schema, and the gate refuses a removed, retyped or newly required field
under the same tag (a new tag is the way), while compatible changes are regenerated."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from controller.agents.shipped import shipped_runtime_catalogs
from controller.cli.schema_export import (
    EVENTS,
    SCHEMAS_DIR,
    check_event_files,
    check_schemas,
    event_catalogs,
    export_event_files,
)
from controller.events import core_events
from controller.events.network import LinkUp
from ledger import Event, EventCatalog
from ledger.event_schemas import check_event_schemas, schema_path

ROOT = Path(__file__).resolve().parents[2]
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


class LinkUpRetyped(Event):
    tag: ClassVar[str] = LinkUp.tag
    sender_id: int
    receiver_id: str


class LinkUpFieldRemoved(Event):
    tag: ClassVar[str] = LinkUp.tag
    sender_id: str


class LinkUpNewRequired(Event):
    tag: ClassVar[str] = LinkUp.tag
    sender_id: str
    receiver_id: str
    reason: str


class LinkUpNewOptional(Event):
    tag: ClassVar[str] = LinkUp.tag
    sender_id: str
    receiver_id: str
    reason: str | None = None


class LinkUpV2(Event):
    tag: ClassVar[str] = "society.link-up/v2"
    sender_id: int


def test_every_core_runtime_and_example_event_has_its_committed_schema() -> None:
    assert check_event_files() == []
    assert check_schemas() == []
    tags = {tag for catalog in event_catalogs() for tag in catalog.tags}
    assert set(core_events.tags) <= tags
    for catalog in shipped_runtime_catalogs().values():
        assert set(catalog.tags) <= tags
    assert {"acme.consensus-reached/v1", "acme.split-agreed/v1"} <= tags  # examples' own
    committed = {path.name for path in (SCHEMAS_DIR / EVENTS).glob("*.schema.json")}
    assert committed == {schema_path(Path(), tag).name for tag in tags}


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS_DIR, copy)
    return copy


def _with(event_class: type[Event]) -> list[EventCatalog]:
    """The real catalogs, with ``event_class`` in place of the class that holds its tag."""
    catalogs = []
    for catalog in event_catalogs():
        kept = [cls for tag, cls in catalog.items() if tag != event_class.tag]
        catalogs.append(EventCatalog.make(*kept))
    return [EventCatalog.make(event_class), *catalogs]


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        (LinkUpRetyped, "senderId: type narrowed"),
        (LinkUpFieldRemoved, "receiverId: removed"),
        (LinkUpNewRequired, "reason is newly required"),
    ],
    ids=["retyped", "removed", "newly-required"],
)
def test_an_incompatible_change_under_the_same_tag_is_refused(
    committed: Path, changed: type[Event], named: str
) -> None:
    before = schema_path(committed / EVENTS, LinkUp.tag).read_bytes()
    (problem,) = check_event_files(committed, _with(changed))
    assert "society.link-up/v1: breaking change under the same tag" in problem and named in problem
    assert "new tag (/v2)" in problem
    written, refused = export_event_files(committed, _with(changed))
    assert written == [] and [r.tag for r in refused] == [LinkUp.tag]
    assert schema_path(committed / EVENTS, LinkUp.tag).read_bytes() == before, "never rewritten"


def test_a_compatible_change_is_regenerated_and_a_new_tag_is_frozen_beside_the_old(
    committed: Path,
) -> None:
    (problem,) = check_event_files(committed, _with(LinkUpNewOptional))
    assert "differs (compatibly)" in problem
    written, refused = export_event_files(committed, _with(LinkUpNewOptional))
    assert refused == [] and written == [schema_path(committed / EVENTS, LinkUp.tag)]
    assert check_event_files(committed, _with(LinkUpNewOptional)) == []

    # Going back would now remove the new field: the regenerated file is what v1 means.
    assert "reason: removed" in check_event_files(committed)[0]
    catalogs = [*_with(LinkUpNewOptional), EventCatalog.make(LinkUpV2)]
    written, refused = export_event_files(committed, catalogs)
    assert refused == [] and written == [schema_path(committed / EVENTS, LinkUpV2.tag)]
    assert check_event_schemas(catalogs, committed / EVENTS) == []


MODULE = """
from typing import ClassVar
from ledger import Event, EventCatalog

class Offer(Event):
    tag: ClassVar[str] = "acme.offer/v1"
    price: {price}
    note: str

catalog = EventCatalog.make(Offer)
"""


def _schema(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SOCIETY, "ledger", "schema", *map(str, argv)],
        capture_output=True, text=True, timeout=120, cwd=cwd, check=False,
    )  # fmt: skip


def test_a_researcher_gates_their_own_catalog_with_ledger_schema_check(tmp_path: Path) -> None:
    module = tmp_path / "experiment.py"
    module.write_text(MODULE.format(price="float"))
    missing = _schema(module, "--check", cwd=tmp_path)
    assert missing.returncode == 1 and "acme.offer.v1.schema.json is missing" in missing.stderr
    wrote = _schema(module, "--write", cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    frozen = tmp_path / "schemas" / "events" / "acme.offer.v1.schema.json"
    assert wrote.stdout.split() == ["schemas/events/acme.offer.v1.schema.json"]
    assert json.loads(frozen.read_bytes())["title"] == "acme.offer/v1"
    assert sorted(p.name for p in frozen.parent.iterdir()) == [frozen.name], "only its own tags"
    assert _schema(module, "--check", cwd=tmp_path).returncode == 0

    module.write_text(MODULE.format(price="str"))  # retyped under the same tag
    broken = _schema(module, "--check", cwd=tmp_path)
    assert broken.returncode == 1 and "acme.offer/v1: breaking change under the same tag" in (
        broken.stderr
    )
    refused = _schema(module, "--write", "--dir", frozen.parent, cwd=ROOT)
    assert refused.returncode == 1 and "not written" in refused.stderr
    assert (
        json.loads(frozen.read_bytes())["$defs"]["acme_offer-v1"]["properties"]["price"]["type"]
        == "number"
    )
