"""A provider that speaks Anthropic Messages (``ProviderConfig(api="anthropic-messages")``).

The gateway's chat path stays the one path for every call (token check, worst-case budget,
usage event, error classes); for such a provider the connection writes the shaped chat request as
a Messages request (``messages_request``) and reads the Message back as a chat completion
(``chat_completion_of``), with the provider's ``input_tokens``/``output_tokens`` as its usage. The
provider's key goes as ``x-api-key`` and stays in the gateway.
"""

from __future__ import annotations

import json
from typing import Any

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024
"""Messages requires ``max_tokens``; the gateway always sets it for a budgeted agent."""
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


def messages_request(chat: dict[str, Any]) -> dict[str, Any]:
    """The Messages request that asks what the chat request ``chat`` asks."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for message in chat.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id") or ""),
                "content": _text(message.get("content")),
            }
            _append(messages, "user", [block])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if text := _text(message.get("content")):
                blocks.append({"type": "text", "text": text})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id") or ""),
                        "name": str(function.get("name") or ""),
                        "input": _arguments(function.get("arguments")),
                    }
                )
            _append(messages, "assistant", blocks)
        else:
            _append(messages, "user", [{"type": "text", "text": _text(message.get("content"))}])
    request: dict[str, Any] = {
        "model": chat.get("model"),
        "max_tokens": chat.get("max_tokens")
        or chat.get("max_completion_tokens")
        or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        request["system"] = "\n\n".join(part for part in system if part)
    for name in ("temperature", "top_p"):
        if name in chat:
            request[name] = chat[name]
    if chat.get("stop"):
        stop = chat["stop"]
        request["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if chat.get("tools"):
        request["tools"] = [
            {
                "name": tool["function"]["name"],
                "description": tool["function"].get("description", ""),
                "input_schema": tool["function"].get("parameters") or {"type": "object"},
            }
            for tool in chat["tools"]
            if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
        ]
    return request


def chat_completion_of(message: dict[str, Any]) -> dict[str, Any]:
    """The chat completion that says what the Message ``message`` says."""
    texts, calls = [], []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        reply["tool_calls"] = calls
    usage = message.get("usage")
    prompt = usage.get("input_tokens") if isinstance(usage, dict) else None
    completion = usage.get("output_tokens") if isinstance(usage, dict) else None
    counted = {}
    if isinstance(prompt, int) and isinstance(completion, int):
        counted = {
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        }
    return {
        "id": str(message.get("id") or ""),
        "object": "chat.completion",
        "created": 0,
        "model": str(message.get("model") or ""),
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": _FINISH.get(str(message.get("stop_reason")), "stop"),
            }
        ],
        **counted,
    }


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Messages alternates roles: consecutive turns of one role become one turn."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _arguments(arguments: object) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
