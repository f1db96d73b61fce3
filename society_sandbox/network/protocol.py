"""Wire protocol v1: the JSON frames agents and the router exchange over one WebSocket.

Every frame is one JSON object in one text message, with a ``type`` discriminator. The client's
first frame is ``authenticate``, which also offers the protocol versions it speaks; the router
answers ``authenticated`` with the version it chose, or an ``error`` frame and a close code.
The JSON Schema is generated from these models: ``python -m society_sandbox.network.protocol``.

Agent-side code imports this module and ``client``; it depends on pydantic and stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from society_sandbox.network.errors import ErrorCode

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
MAX_PARTS = 10
MAX_PART_BYTES = 32 * 1024
MAX_FRAME_BYTES = 2 * 1024 * 1024
"""Room for ten 32 KiB parts even when JSON escapes every byte (6x), plus the envelope."""
MAX_CONVERSATION_PARTICIPANTS = 64

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""A roster or endpoint name."""

ParticipantName = Annotated[str, Field(pattern=NAME_PATTERN)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,159}$")]
RequestId = Annotated[str, Field(pattern=r"^[\x21-\x7e]{1,128}$")]


def _part_within_limit(part: str) -> str:
    if part.isascii():  # O(1) in CPython: one byte per code point, nothing to encode
        size = len(part)
    else:
        try:
            size = len(part.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(
                "a message part is Unicode text; this one holds a lone surrogate, which UTF-8 "
                "(and so the ledger) cannot encode"
            ) from None
    if size > MAX_PART_BYTES:
        raise ValueError(f"a message part holds at most {MAX_PART_BYTES} bytes of UTF-8")
    return part


Part = Annotated[str, AfterValidator(_part_within_limit)]
Parts = Annotated[list[Part], Field(min_length=1, max_length=MAX_PARTS)]


class _Frame(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class Participant(_Frame):
    """A router-issued identity: ``id`` (``agent:alice``) and the roster or endpoint ``name``."""

    id: Identifier
    name: ParticipantName


class HasParticipant(Protocol):
    """Anything that stands for a participant, such as an ``Endpoint``."""

    @property
    def participant(self) -> Participant: ...


ParticipantRef = str | Participant | HasParticipant
"""A participant named by name, by identity, or by something holding one (an endpoint)."""


# ---- client -> router ----------------------------------------------------------------------


class Authenticate(_Frame):
    """First frame: the router-issued token and the protocol versions the client speaks."""

    type: Literal["authenticate"] = "authenticate"
    versions: Annotated[list[int], Field(min_length=1, max_length=16)]
    token: Annotated[str, Field(min_length=1, max_length=256)]


class OpenConversation(_Frame):
    """Open a conversation with the named participants (the opener joins it too)."""

    type: Literal["open"] = "open"
    request_id: RequestId
    participants: Annotated[
        list[ParticipantName], Field(min_length=1, max_length=MAX_CONVERSATION_PARTICIPANTS)
    ]


class SendMessage(_Frame):
    """Send 1-10 text parts to a conversation; ``client_message_id`` makes a retry idempotent."""

    type: Literal["send"] = "send"
    request_id: RequestId
    conversation_id: Identifier
    client_message_id: RequestId
    parts: Parts


class DeliveryAck(_Frame):
    """The receiver has the message; the router records it in ``RouterMessagesDelivered``."""

    type: Literal["delivery-ack"] = "delivery-ack"
    message_id: Identifier


class Heartbeat(_Frame):
    """Either side sends one when it has sent nothing else for a heartbeat interval."""

    type: Literal["heartbeat"] = "heartbeat"


# ---- router -> client ----------------------------------------------------------------------


class Authenticated(_Frame):
    """The router accepted the token; the connection speaks ``version`` from now on."""

    type: Literal["authenticated"] = "authenticated"
    version: int
    participant: Participant
    heartbeat_interval_seconds: float
    heartbeat_timeout_seconds: float
    max_frame_bytes: int


class ConversationOpenedFrame(_Frame):
    """Answer to ``open``."""

    type: Literal["opened"] = "opened"
    request_id: RequestId
    conversation_id: Identifier
    participants: list[Participant]


class SendAckFrame(_Frame):
    """The message is committed to the ledger under ``message_id`` and ``router_sequence``."""

    type: Literal["ack"] = "ack"
    request_id: RequestId
    client_message_id: RequestId
    message_id: Identifier
    router_sequence: int


class DeliveryFrame(_Frame):
    """A committed message for this receiver; answer with ``delivery-ack``."""

    type: Literal["delivery"] = "delivery"
    message_id: Identifier
    conversation_id: Identifier
    sender: Participant
    participants: list[Participant]
    parts: Parts
    router_sequence: int


class ErrorFrame(_Frame):
    """A typed refusal; ``request_id`` names the request it answers, when there is one."""

    type: Literal["error"] = "error"
    code: ErrorCode
    message: str
    request_id: RequestId | None = None


ClientFrame = Annotated[
    Authenticate | OpenConversation | SendMessage | DeliveryAck | Heartbeat,
    Field(discriminator="type"),
]
RouterFrame = Annotated[
    Authenticated | ConversationOpenedFrame | SendAckFrame | DeliveryFrame | ErrorFrame | Heartbeat,
    Field(discriminator="type"),
]
_client_frames: TypeAdapter[ClientFrame] = TypeAdapter(ClientFrame)
_router_frames: TypeAdapter[RouterFrame] = TypeAdapter(RouterFrame)


def parse_client_frame(raw: str | bytes) -> ClientFrame:
    """Validate one frame a client sent (camelCase keys only); raises ``ValidationError``."""
    return _client_frames.validate_json(raw, by_alias=True, by_name=False)


def parse_router_frame(raw: str | bytes) -> RouterFrame:
    """Validate one frame the router sent (camelCase keys only); raises ``ValidationError``."""
    return _router_frames.validate_json(raw, by_alias=True, by_name=False)


def encode(frame: _Frame) -> str:
    return frame.model_dump_json()


# The frames every message produces are spelled out: the same bytes ``encode`` gives for
# ``SendAckFrame``, ``DeliveryFrame`` and ``DeliveryAck`` (a test holds them equal) without
# building a model.
_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@lru_cache(maxsize=4096)
def _participant_json(participant: Participant) -> str:
    return participant.model_dump_json()


def encode_ack(request_id: str, client_message_id: str, ack: SendAck) -> str:
    """``encode(SendAckFrame(...))`` for a committed send."""
    return (
        f'{{"type":"ack","requestId":{_json(request_id)},'
        f'"clientMessageId":{_json(client_message_id)},"messageId":{_json(ack.message_id)},'
        f'"routerSequence":{ack.router_sequence}}}'
    )


def encode_delivery_ack(message_id: str) -> str:
    """``encode(DeliveryAck(message_id=...))`` for an id the router sent."""
    return f'{{"type":"delivery-ack","messageId":{_json(message_id)}}}'


def encode_delivery(delivery: Delivery) -> str:
    """``encode(DeliveryFrame(...))`` for one committed message."""
    participants = ",".join(map(_participant_json, delivery.participants))
    return (
        f'{{"type":"delivery","messageId":{_json(delivery.message_id)},'
        f'"conversationId":{_json(delivery.conversation_id)},'
        f'"sender":{_participant_json(delivery.sender)},"participants":[{participants}],'
        f'"parts":{_json(delivery.parts)},"routerSequence":{delivery.router_sequence}}}'
    )


def protocol_json_schema() -> dict[str, Any]:
    """JSON Schema of protocol v1, generated from the frame models."""
    client = _client_frames.json_schema(by_alias=True, ref_template="#/$defs/{model}")
    router = _router_frames.json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs = {**client.pop("$defs", {}), **router.pop("$defs", {})}
    defs["ClientFrame"] = client
    defs["RouterFrame"] = router
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"Society Runner wire protocol v{PROTOCOL_VERSION}",
        "description": "One JSON object per WebSocket text frame; the client's first frame is "
        "'authenticate'.",
        "oneOf": [{"$ref": "#/$defs/ClientFrame"}, {"$ref": "#/$defs/RouterFrame"}],
        "$defs": defs,
    }


# ---- what applications see -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """One committed message as its receiver's application gets it, exactly once."""

    message_id: str
    conversation_id: str
    sender: Participant
    participants: tuple[Participant, ...]
    parts: tuple[str, ...]
    router_sequence: int

    @property
    def text(self) -> str:
        """The parts joined by newlines."""
        return "\n".join(self.parts)


@dataclass(frozen=True, slots=True)
class ConversationRef:
    """An open conversation: its router-assigned id and every participant in it."""

    conversation_id: str
    participants: tuple[Participant, ...]


@dataclass(frozen=True, slots=True)
class SendAck:
    """The router committed the message under this id and sequence."""

    message_id: str
    router_sequence: int


if __name__ == "__main__":
    print(json.dumps(protocol_json_schema(), indent=2, sort_keys=True))
