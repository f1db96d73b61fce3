"""A chat completion written back as an Anthropic Message, and a Message as its event stream.

The stream is the full sequence a Messages client expects: ``message_start`` (usage with the
input tokens), ``ping``, for each content block ``content_block_start``, its deltas
(``text_delta`` or ``input_json_delta``) and ``content_block_stop``, then ``message_delta`` (the
stop reason and output tokens) and ``message_stop``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_TEXT_CHUNK = 64
"""Characters per ``text_delta``: a client sees a stream of several deltas, as from a provider."""


def as_message(completion: dict[str, Any], *, message_id: str, model: str) -> dict[str, Any]:
    """The Message that says what the chat ``completion``'s first choice says."""
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    reply = choice.get("message") if isinstance(choice, dict) else None
    reply = reply if isinstance(reply, dict) else {}
    content: list[dict[str, Any]] = []
    text = reply.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = reply.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        block = _tool_use(call)
        if block is not None:
            content.append(block)
    if not content:
        content.append({"type": "text", "text": ""})
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else None
    usage = completion.get("usage")
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason or _STOP_REASONS.get(str(finish), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": _count(usage, "prompt_tokens"),
            "output_tokens": _count(usage, "completion_tokens"),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _tool_use(call: object) -> dict[str, Any] | None:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        return None
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (TypeError, ValueError):
        arguments = None
    call_id = call.get("id")
    return {
        "type": "tool_use",
        "id": call_id if isinstance(call_id, str) and call_id else _tool_use_id(),
        "name": name,
        "input": arguments if isinstance(arguments, dict) else {},
    }


def as_event_stream(message: dict[str, Any]) -> bytes:
    """The server-sent events that stream ``message``, start to stop, as one body."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
        for name, data in events
    )


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if block["type"] == "tool_use":
        opened = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    else:
        opened = {"type": "text", "text": ""}
        text = block["text"]
        pieces = [text[i : i + _TEXT_CHUNK] for i in range(0, len(text), _TEXT_CHUNK)]
        deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index,
                                 "content_block": opened}),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]  # fmt: skip


def _count(usage: object, field: str) -> int:
    value = usage.get(field) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _tool_use_id() -> str:
    return f"toolu_{secrets.token_hex(12)}"
