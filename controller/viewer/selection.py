"""Which records and messages of a ledger to show: by agent, by conversation, by event tag.

Each kind of filter keeps what matches any of its values; several kinds keep what matches all of
them. A filter naming nothing the ledger holds is refused (``SelectionError``), naming what it
does hold, so a typo never reads as "nothing happened".
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from controller.viewer.conversations import Conversation, MessageBook, MessageTrail
from ledger import LedgerError

_PARTICIPANT_FIELDS = ("senderId", "receiverId", "openedBy", "endpointId")
"""Event fields that hold one participant id (``agent:ann``, ``endpoint:workload``)."""


class SelectionError(LedgerError):
    """An ``--agent``, ``--conversation`` or ``--tag`` names nothing the ledger holds.

    ``reason`` is ``unknown-agent``, ``unknown-conversation`` or ``unknown-tag``.
    """

    reason = "selection-unknown"


@dataclass(frozen=True, slots=True)
class Selection:
    """What a filter kept: the records in ledger order, and the conversations (each with only
    its kept messages; a conversation left with none is left out)."""

    records: list[Mapping[str, Any]]
    conversations: list[Conversation]
    book: MessageBook

    def tag_counts(self) -> dict[str, int]:
        """How many kept records carry each tag."""
        return dict(Counter(_tag(row) for row in self.records))


@dataclass(frozen=True, slots=True)
class LedgerFilter:
    """Agent names (``ann``, ``agent:ann``, an endpoint's name), conversation ids and event tags
    (``society.link-message-dropped/v1``, ``link-message-dropped`` or a glob such as ``link-*``)
    to keep; an empty kind keeps everything."""

    agents: tuple[str, ...] = ()
    conversations: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    def apply(
        self, rows: Sequence[Mapping[str, Any]], *, declared_tags: Iterable[str] = ()
    ) -> Selection:
        """Keep what ``rows`` (envelopes in wire form) hold that matches; ``declared_tags`` (the
        manifest's catalog) are tags a ``--tag`` may name though no record carries one."""
        book = MessageBook.of_rows(rows)
        participants = _participants(rows, book)
        ids = {resolved for name in self.agents for resolved in _agent_ids(name, participants)}
        for name in self.conversations:
            if name not in book.conversations:
                raise _unknown("conversation", name, sorted(book.conversations))
        tags = {_tag(row) for row in rows} | {t for t in declared_tags if isinstance(t, str)}
        for pattern in self.tags:
            if not any(_tag_matches(tag, pattern) for tag in tags):
                names = sorted({short for tag in tags for short in (tag, _short(tag))})
                raise _unknown("tag", pattern, names, shown=sorted(tags))
        matcher = _Matcher(self, frozenset(ids), book)
        conversations = [
            replace(conversation, messages=kept)
            for conversation in book.conversations.values()
            if (kept := [trail for trail in conversation.messages if matcher.keeps_message(trail)])
        ]
        records = [row for row in rows if matcher.keeps_record(row)]
        return Selection(records, conversations, book)


@dataclass(frozen=True, slots=True)
class _Matcher:
    wanted: LedgerFilter
    participants: frozenset[str]
    book: MessageBook

    def keeps_record(self, row: Mapping[str, Any]) -> bool:
        event = row.get("event")
        event = event if isinstance(event, Mapping) else {}
        if self.wanted.agents and not (_record_participants(event) & self.participants):
            return False
        if self.wanted.conversations and not (
            self._record_conversations(event) & set(self.wanted.conversations)
        ):
            return False
        return not self.wanted.tags or self._tag_kept(_tag(row))

    def keeps_message(self, trail: MessageTrail) -> bool:
        if self.wanted.agents:
            touched = {trail.message.sender, *(fate.receiver for fate in trail.fates)}
            if not touched & self.participants:
                return False
        if self.wanted.conversations and trail.message.conversation_id not in set(
            self.wanted.conversations
        ):
            return False
        return not self.wanted.tags or any(self._tag_kept(tag) for tag in trail.tags)

    def _tag_kept(self, tag: str) -> bool:
        return any(_tag_matches(tag, pattern) for pattern in self.wanted.tags)

    def _record_conversations(self, event: Mapping[str, Any]) -> set[str]:
        found = {event["conversationId"]} if isinstance(event.get("conversationId"), str) else set()
        messages = self.book.messages
        found.update(messages[i].message.conversation_id for i in self.book.message_ids_of(event))
        return found


def _record_participants(event: Mapping[str, Any]) -> set[str]:
    """The participant ids a record names: a sender, receiver, endpoint, opener or participant,
    or an ``agent`` field (a bare roster name)."""
    found = {event[key] for key in _PARTICIPANT_FIELDS if isinstance(event.get(key), str)}
    listed = event.get("participants")
    if isinstance(listed, list):
        found.update(p for p in listed if isinstance(p, str))
    if isinstance(event.get("agent"), str):
        found.add(f"agent:{event['agent']}")
    return found


def _participants(rows: Sequence[Mapping[str, Any]], book: MessageBook) -> set[str]:
    """Every participant id the ledger names, the roster's agents among them."""
    found: set[str] = set()
    for row in rows:
        event = row.get("event")
        if not isinstance(event, Mapping):
            continue
        found |= _record_participants(event)
        roster = event.get("roster") if _tag(row) == "society.run-started/v1" else None
        if isinstance(roster, list):
            found.update(f"agent:{name}" for name in roster if isinstance(name, str))
    return found


def _agent_ids(name: str, participants: set[str]) -> set[str]:
    """The participant ids ``name`` stands for: itself when it is an id (``agent:ann``), else the
    agent and the endpoint of that name the ledger holds."""
    candidates = {name} if ":" in name else {f"agent:{name}", f"endpoint:{name}"}
    found = candidates & participants
    if not found:
        names = sorted({p.partition(":")[2] or p for p in participants})
        raise _unknown("agent", name, sorted({*names, *participants}), shown=names)
    return found


def _unknown(
    kind: str, name: str, known: list[str], *, shown: list[str] | None = None
) -> SelectionError:
    """``no agent "anne" in this ledger (did you mean "ann"?); agents in it: ann, ben``."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    listed = ", ".join(shown if shown is not None else known) or "none"
    return SelectionError(
        f'no {kind} "{name}" in this ledger{hint}; {kind}s in it: {listed}',
        reason=f"unknown-{kind}",
    )


def _tag(row: Mapping[str, Any]) -> str:
    event = row.get("event")
    tag = event.get("tag") if isinstance(event, Mapping) else None
    return tag if isinstance(tag, str) else "?"


def _short(tag: str) -> str:
    """``society.link-message-dropped/v1`` -> ``link-message-dropped``."""
    return tag.partition("/")[0].partition(".")[2] or tag.partition("/")[0]


def _tag_matches(tag: str, pattern: str) -> bool:
    """A tag matches its full name, its name without the version, or its short name (globs
    allowed in each)."""
    return any(fnmatchcase(form, pattern) for form in (tag, tag.partition("/")[0], _short(tag)))
