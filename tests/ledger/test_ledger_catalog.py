"""Catalogs are closed and versioned: bad tags fail when the catalog is built, not at run time."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from ledger_testkit import Counted, Said, Unused, catalog

from ledger import CatalogError, Event, EventCatalog, ledger_catalog


def _event_class(tag: Any, **fields: Any) -> type[Event]:
    namespace: dict[str, Any] = {"__annotations__": {"value": "int"}}
    if tag is not None:
        namespace["tag"] = tag
        namespace["__annotations__"]["tag"] = ClassVar[str]
    return type("Made", (Event,), namespace)


@pytest.mark.parametrize(
    "tag",
    [
        "acme.thing-happened",  # unversioned
        "acme.thing-happened/v0",
        "acme.thing-happened/1",
        "thing-happened/v1",  # not dotted
        "Acme.Thing/v1",  # not lowercase
        "acme.thing happened/v1",
        "",
        7,
    ],
)
def test_a_malformed_or_unversioned_tag_is_refused(tag: Any) -> None:
    with pytest.raises(CatalogError) as caught:
        EventCatalog.make(_event_class(tag))
    assert caught.value.reason == "malformed-tag"


def test_a_class_without_its_own_tag_is_refused() -> None:
    class Inherits(Said):
        pass

    with pytest.raises(CatalogError) as caught:
        EventCatalog.make(Inherits)
    assert caught.value.reason == "malformed-tag"


def test_two_classes_under_one_tag_are_refused() -> None:
    twin = _event_class(Said.tag)
    with pytest.raises(CatalogError) as caught:
        EventCatalog.make(Said, twin)
    assert caught.value.reason == "duplicate-tag"
    with pytest.raises(CatalogError):
        EventCatalog.merge(catalog, EventCatalog.make(twin))


def test_one_class_under_two_tags_is_refused() -> None:
    aliased = EventCatalog({"test.said/v1": Said, "test.spoken/v1": Said})
    with pytest.raises(CatalogError) as caught:
        EventCatalog.merge(aliased)
    assert caught.value.reason == "class-under-two-tags"


def test_a_field_named_tag_and_a_non_event_are_refused() -> None:
    class Tagged(Event):
        tag: str  # type: ignore[misc]  # a field, not the class tag: refused

    with pytest.raises(CatalogError) as caught:
        EventCatalog.merge(EventCatalog({"test.tagged/v1": Tagged}))
    assert caught.value.reason == "reserved-field"
    with pytest.raises(CatalogError) as caught:
        EventCatalog.make(dict)  # type: ignore[arg-type]
    assert caught.value.reason == "not-an-event"


def test_merging_the_same_class_twice_is_one_entry() -> None:
    merged = EventCatalog.merge(catalog, EventCatalog.make(Said), ledger_catalog)
    assert merged.tags == ["ledger.checkpoint/v1", "test.counted/v1", "test.said/v1"]
    assert len(merged) == 3 and Said in merged and "test.said/v1" in merged


def test_a_closed_catalog_encodes_and_decodes_only_its_classes() -> None:
    wire = catalog.encode(Said(speaker="a", text="b"))
    assert wire == {"tag": "test.said/v1", "speaker": "a", "text": "b"}
    assert catalog.decode(wire) == Said(speaker="a", text="b")
    with pytest.raises(CatalogError) as caught:
        catalog.encode(Unused(flag=True))
    assert caught.value.reason == "undeclared-event"
    with pytest.raises(CatalogError) as caught:
        catalog.decode({"tag": "test.unused/v1", "flag": True})
    assert caught.value.reason == "unknown-tag"
    with pytest.raises(CatalogError) as caught:
        catalog.decode({"tag": "test.said/v1", "speaker": "a", "text": "b", "extra": 1})
    assert caught.value.reason == "event-invalid"
    with pytest.raises(CatalogError) as caught:
        catalog.decode({"speaker": "a"})
    assert caught.value.reason == "unknown-tag"


def test_fields_are_camel_case_on_the_wire() -> None:
    class Renamed(Event):
        tag: ClassVar[str] = "test.renamed/v1"

        message_count: int

    wire = EventCatalog.make(Renamed).encode(Renamed(message_count=3))
    assert wire == {"tag": "test.renamed/v1", "messageCount": 3}
    with pytest.raises(CatalogError):  # the Python name is not accepted on the wire
        EventCatalog.make(Renamed).decode({"tag": "test.renamed/v1", "message_count": 3})


def test_the_json_schema_is_generated_from_the_models() -> None:
    schema = EventCatalog.make(Said, Counted).json_schema()
    assert schema["$schema"].endswith("2020-12/schema")
    assert schema["oneOf"] == [
        {"$ref": "#/$defs/test_counted-v1"},
        {"$ref": "#/$defs/test_said-v1"},
    ]
    said = schema["$defs"]["test_said-v1"]
    assert said["properties"]["tag"] == {"const": "test.said/v1"}
    assert said["properties"]["speaker"]["type"] == "string"
    assert said["required"] == ["tag", "speaker", "text"]
    assert said["additionalProperties"] is False
    assert schema["$defs"]["test_counted-v1"]["properties"]["n"]["type"] == "integer"
