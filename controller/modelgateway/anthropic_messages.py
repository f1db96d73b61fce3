"""The gateway's Anthropic Messages endpoint: ``POST /v1/messages``, answered by a chat completion.

A Messages request (``system`` as a string or text blocks, ``role: "system"`` messages folded into
it, ``tool_use``/``tool_result`` blocks, tools, stop sequences) becomes one OpenAI-style chat
completion, which goes through the gateway's own chat path: the same token check, worst-case
budget, provider connection, usage event and error classes. Its answer comes back as a Message, or,
for ``"stream": true``, as the whole server-sent event sequence of one (the provider answers whole
completions, so the events are written once the answer is in). Fields this endpoint does not use
(``metadata``, ``thinking``, ``cache_control``, ``output_config``, ...) and the ``?beta=true``
query are tolerated and dropped; what it cannot translate gets a typed ``invalid_request_error``.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from controller.modelgateway._http import HttpResponse
from controller.modelgateway.anthropic_stream import as_event_stream, as_message

MESSAGES_PATH = "/v1/messages"
ChatForward = Callable[[bytes], Awaitable[HttpResponse]]
"""The gateway's chat path for one agent: an OpenAI chat body in, the gateway's answer out."""

_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Blocks a chat model has no field for and needs not see: the client's own reasoning record."""
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


class InvalidMessages(ValueError):
    """A Messages request this endpoint cannot translate; the message says what to change."""


async def messages_call(body: bytes, forward: ChatForward) -> HttpResponse:
    """Answer one ``POST /v1/messages`` with ``body``, through ``forward`` (the chat path)."""
    try:
        request = _parse(body)
        chat = chat_request(request)
    except InvalidMessages as invalid:
        return error_response(400, str(invalid), "invalid_request")
    answer = await forward(json.dumps(chat, ensure_ascii=False).encode())
    if answer.status != 200:
        return _translated_error(answer)
    try:
        completion = json.loads(answer.body)
    except ValueError:
        return error_response(502, "the provider's answer is not JSON", "unknown")
    model = completion.get("model") or chat.get("model") or ""
    message = as_message(completion, message_id=_message_id(), model=str(model))
    if request.get("stream") is True:
        return HttpResponse(200, as_event_stream(message), content_type="text/event-stream")
    return HttpResponse.json(200, message)


def not_found(method: str, path: str) -> HttpResponse:
    """The answer to any other request under ``/v1/messages``."""
    if path == MESSAGES_PATH:
        return error_response(405, f"{method} is not allowed on {path}; send POST", None)
    return error_response(
        404, f"no route {path}; the gateway's Anthropic endpoint is POST {MESSAGES_PATH}", None
    )


def error_response(status: int, message: str, code: str | None) -> HttpResponse:
    """An Anthropic-shaped error; ``code`` is the gateway's machine-readable one (as on the
    OpenAI path), beside the ``type`` Anthropic clients read."""
    error_type = _ERROR_TYPES.get(status, "api_error")
    payload = {"type": "error", "error": {"type": error_type, "message": message, "code": code}}
    return HttpResponse.json(status, payload)


def _translated_error(answer: HttpResponse) -> HttpResponse:
    try:
        error = json.loads(answer.body)["error"]
        message, code = str(error["message"]), error.get("code")
    except (ValueError, KeyError, TypeError):
        message, code = "the gateway could not answer this call", None
    return error_response(answer.status, message, code if isinstance(code, str) else None)


def _parse(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body, parse_constant=_not_json)
        json.dumps(request, ensure_ascii=False).encode("utf-8")  # lone surrogates cannot go on
    except (ValueError, RecursionError):
        raise InvalidMessages("the request body is not JSON text that UTF-8 can carry") from None
    if not isinstance(request, dict):
        raise InvalidMessages("the request body must be a JSON object")
    return request


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def chat_request(request: dict[str, Any]) -> dict[str, Any]:
    """The chat completion that asks the provider what ``request`` asks (``stream`` left out)."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidMessages('"messages" must be a non-empty list of {role, content} objects')
    system = _text_of(request.get("system"), "system")
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidMessages(f"messages[{index}] must be an object with role and content")
        role = message.get("role")
        if role == "system":  # some clients put instructions here; the system prompt holds them
            system = "\n\n".join(p for p in (system, _text_of(message.get("content"), "")) if p)
        elif role in ("user", "assistant"):
            turns.extend(_turns(role, message.get("content"), index))
        else:
            raise InvalidMessages(f'messages[{index}].role must be "user" or "assistant"')
    chat: dict[str, Any] = {"messages": [{"role": "system", "content": system}] if system else []}
    chat["messages"].extend(turns)
    for name in ("model", "max_tokens"):
        if name in request:
            chat[name] = request[name]
    chat.update(_sampling(request))
    tools = _tools(request.get("tools"))
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(request.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
    return chat


def _text_of(content: object, where: str) -> str:
    """A string, or the text of a list of text blocks (others dropped), as one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if not isinstance(block, dict):
                raise InvalidMessages(f"{where or 'content'} blocks must be objects")
            if block.get("type") == "text":
                texts.append(_string(block.get("text"), f"{where or 'content'} text"))
        return "\n".join(texts)
    raise InvalidMessages(f"{where or 'content'} must be a string or a list of text blocks")


def _turns(role: str, content: object, index: int) -> list[dict[str, Any]]:
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise InvalidMessages(f"{where} must be a string or a list of content blocks")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(block, dict) or not isinstance(kind, str):
            raise InvalidMessages(f"{where} blocks must be objects with a string type")
        if kind == "text":
            texts.append(_string(block.get("text"), f"{where} text"))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_call(block, where))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, where))
        elif kind not in _DROPPED_BLOCKS:
            raise InvalidMessages(
                f"{where} holds a {kind!r} block, which the gateway cannot pass to a chat model "
                f"(it takes text, tool_use from the assistant and tool_result from the user)"
            )
    turns = list(results)  # tool results answer the previous turn's calls: they come first
    if role == "assistant" and calls:
        turns.append({"role": "assistant", "content": "\n".join(texts), "tool_calls": calls})
    elif texts or not results:
        turns.append({"role": role, "content": "\n".join(texts)})
    return turns


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise InvalidMessages(f"{where}: a tool_use block's input must be an object")
    return {
        "id": _string(block.get("id"), f"{where} tool_use id"),
        "type": "function",
        "function": {
            "name": _string(block.get("name"), f"{where} tool_use name"),
            "arguments": json.dumps(arguments, ensure_ascii=False),
        },
    }


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    text = _text_of(block.get("content"), f"{where} tool_result content")
    if block.get("is_error") is True:
        text = f"error: {text}"
    return {
        "role": "tool",
        "tool_call_id": _string(block.get("tool_use_id"), f"{where} tool_use_id"),
        "content": text,
    }


def _tools(tools: object) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidMessages('"tools" must be a list of {name, description, input_schema}')
    functions = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InvalidMessages(f"tools[{index}] must be an object")
        if "input_schema" not in tool:
            continue  # a server tool (web search, ...): nothing a chat model can run
        schema = tool["input_schema"]
        if not isinstance(schema, dict):
            raise InvalidMessages(f"tools[{index}].input_schema must be a JSON Schema object")
        function: dict[str, Any] = {
            "name": _string(tool.get("name"), f"tools[{index}].name"),
            "parameters": schema,
        }
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        functions.append({"type": "function", "function": function})
    return functions


def _tool_choice(choice: object) -> object:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(choice, dict) and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidMessages('"tool_choice" must be {"type": "auto" | "any" | "none" | "tool"}')


def _sampling(request: dict[str, Any]) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    for name, ceiling in (("temperature", 2.0), ("top_p", 1.0)):
        value = request.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise InvalidMessages(f'"{name}" must be a number')
        if not 0 <= value <= ceiling:
            raise InvalidMessages(f'"{name}" must be between 0 and {ceiling:g}')
        sampling[name] = value
    stops = request.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise InvalidMessages('"stop_sequences" must be a list of non-empty strings')
        if stops:
            sampling["stop"] = stops
    return sampling


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidMessages(f"{what} must be a string")
    return value


def _message_id() -> str:
    return f"msg_{secrets.token_hex(12)}"
