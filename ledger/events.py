"""The ``Event`` base class and closed, versioned ``EventCatalog``s."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.json_schema import models_json_schema

from ledger.canonical import canonical_json
from ledger.errors import CatalogError

TAG_PATTERN = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)+/v[1-9][0-9]*\Z")


class Event(BaseModel):
    """Base of every ledger event: frozen, closed (``extra="forbid"``), with a versioned tag.

    Subclasses declare ``tag: ClassVar[str] = "acme.consensus-reached/v1"``. Fields are written
    snake_case in Python and camelCase on disk.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        ser_json_inf_nan="strings",
    )

    tag: ClassVar[str]

    def to_wire(self) -> dict[str, Any]:
        """The JSON object stored in a record's ``event`` field: ``tag`` plus the fields."""
        # the serializer model_dump calls, without model_dump's keyword handling (half its cost)
        body = self.__pydantic_serializer__.to_python(self, mode="json", by_alias=True)
        return {"tag": type(self).tag, **body}


def validate_tag(tag: object, owner: str) -> str:
    if not isinstance(tag, str) or not TAG_PATTERN.match(tag):
        raise CatalogError(
            f"event class {owner} has tag {tag!r}; a tag must look like "
            f"'acme.consensus-reached/v1' (lowercase dotted name, '/v' and a version >= 1)",
            reason="malformed-tag",
        )
    return tag


class EventCatalog:
    """A closed set of event classes, one per versioned tag. Build with ``make`` or ``merge``."""

    __slots__ = ("_by_class", "_by_tag")

    def __init__(self, by_tag: Mapping[str, type[Event]]) -> None:
        self._by_tag: dict[str, type[Event]] = dict(sorted(by_tag.items()))
        self._by_class: dict[type[Event], str] = {cls: tag for tag, cls in self._by_tag.items()}

    @classmethod
    def make(cls, *event_classes: type[Event]) -> EventCatalog:
        by_tag: dict[str, type[Event]] = {}
        seen: dict[type[Event], str] = {}
        for event_class in event_classes:
            _add(by_tag, seen, event_class)
        return cls(by_tag)

    @classmethod
    def merge(cls, *catalogs: EventCatalog) -> EventCatalog:
        by_tag: dict[str, type[Event]] = {}
        seen: dict[type[Event], str] = {}
        for catalog in catalogs:
            for tag, event_class in catalog.items():
                if seen.get(event_class) == tag:
                    continue  # the same class reached through two catalogs is one entry
                _add(by_tag, seen, event_class, tag)
        return cls(by_tag)

    @property
    def tags(self) -> list[str]:
        return list(self._by_tag)

    def items(self) -> Iterator[tuple[str, type[Event]]]:
        return iter(self._by_tag.items())

    def __iter__(self) -> Iterator[type[Event]]:
        return iter(self._by_tag.values())

    def __len__(self) -> int:
        return len(self._by_tag)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._by_tag
        return item in self._by_class

    def class_for(self, tag: str) -> type[Event]:
        try:
            return self._by_tag[tag]
        except KeyError:
            raise CatalogError(
                f"tag {tag!r} is not in this catalog; add its event class to the catalog "
                f"(catalog holds {len(self._by_tag)} tags)",
                reason="unknown-tag",
            ) from None

    def encode(self, event: Event) -> dict[str, Any]:
        """The wire object of ``event``; fails for a class this catalog does not hold."""
        event_class = type(event)
        if self._by_class.get(event_class) is None:
            raise CatalogError(
                f"event class {event_class.__qualname__} ({getattr(event_class, 'tag', '?')}) is "
                f"not declared in this run's catalog; list it in the RunSpec's events",
                reason="undeclared-event",
            )
        return event.to_wire()

    def decode(self, wire: Mapping[str, Any], *, strict: bool = False) -> Event:
        """Validate a wire object against its class; unknown tags and fields are refused.

        ``strict`` validates the object as JSON in pydantic's strict mode, so no value is coerced
        (``"5"`` is not an integer): what a grader reads is what the bytes say.
        """
        tag = wire.get("tag")
        if not isinstance(tag, str):
            raise CatalogError("event object has no string 'tag'", reason="unknown-tag")
        event_class = self.class_for(tag)
        body = dict(wire)
        del body["tag"]
        try:
            if strict:
                return event_class.model_validate_json(
                    canonical_json(body), strict=True, by_alias=True, by_name=False
                )
            return event_class.model_validate(body, strict=False, by_alias=True, by_name=False)
        except ValidationError as exc:
            raise CatalogError(
                f"event {tag} does not match its class {event_class.__qualname__}: {exc}",
                reason="event-invalid",
            ) from exc

    def json_schema(self) -> dict[str, Any]:
        """JSON Schema of every event in the catalog, generated from the models."""
        _, defs = models_json_schema(
            [(cls, "serialization") for cls in self._by_tag.values()], by_alias=True
        )
        definitions = defs.get("$defs", {})
        variants = []
        for tag, cls in self._by_tag.items():
            schema = dict(definitions.get(cls.__name__, {"type": "object"}))
            properties = {"tag": {"const": tag}, **schema.get("properties", {})}
            schema["properties"] = properties
            schema["required"] = ["tag", *schema.get("required", [])]
            schema["additionalProperties"] = False
            schema["title"] = tag
            definitions[_schema_name(tag)] = schema
            variants.append({"$ref": f"#/$defs/{_schema_name(tag)}"})
        for cls in self._by_tag.values():
            definitions.pop(cls.__name__, None)
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Society Runner event catalog",
            "oneOf": variants,
            "$defs": definitions,
        }


def _schema_name(tag: str) -> str:
    return tag.replace("/", "-").replace(".", "_")


def _add(
    by_tag: dict[str, type[Event]],
    seen: dict[type[Event], str],
    event_class: Any,
    tag: str | None = None,
) -> None:
    if not (isinstance(event_class, type) and issubclass(event_class, Event)):
        raise CatalogError(f"{event_class!r} is not an Event subclass", reason="not-an-event")
    if tag is None:
        if "tag" not in event_class.__dict__:
            raise CatalogError(
                f"event class {event_class.__qualname__} declares no tag of its own; add "
                f"tag: ClassVar[str] = 'acme.something-happened/v1' to its body",
                reason="malformed-tag",
            )
        tag = event_class.__dict__["tag"]
    tag = validate_tag(tag, event_class.__qualname__)
    if "tag" in event_class.model_fields:
        raise CatalogError(
            f"event class {event_class.__qualname__} declares a field named 'tag', which the "
            f"ledger reserves; rename the field",
            reason="reserved-field",
        )
    if tag in by_tag and by_tag[tag] is not event_class:
        raise CatalogError(
            f"duplicate tag {tag!r}: {by_tag[tag].__qualname__} and {event_class.__qualname__}; "
            f"give one of them a new name or version",
            reason="duplicate-tag",
        )
    if event_class in seen and seen[event_class] != tag:
        raise CatalogError(
            f"event class {event_class.__qualname__} is listed under two tags "
            f"({seen[event_class]!r} and {tag!r})",
            reason="class-under-two-tags",
        )
    by_tag[tag] = event_class
    seen[event_class] = tag
