"""A scripted OpenAI-compatible provider on 127.0.0.1, for gateway and llm runtime tests.

A fake because a paid provider cannot run here. It stays honest where the gateway relies on
providers: a completion never has more tokens than the request's ``max_tokens`` (or
``max_completion_tokens``) allows, and a prompt never more tokens than the request has bytes.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ScriptedReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def completion(
    prompt_tokens: int = 11, completion_tokens: int = 7, *, usage: bool = True
) -> ScriptedReply:
    reply = ScriptedReply(
        200,
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        },
    )
    if not usage:
        del reply.body["usage"]
    return reply


def provider_error(status: int, message: str, code: str | None = None) -> ScriptedReply:
    return ScriptedReply(status, {"error": {"message": message, "type": "error", "code": code}})


def _honest(answer: dict[str, Any], request: dict[str, Any], request_bytes: int) -> dict[str, Any]:
    """The scripted answer, its usage clipped to what a real provider could have counted."""
    usage = answer.get("usage")
    if not isinstance(usage, dict):
        return answer
    limits = [request[k] for k in ("max_tokens", "max_completion_tokens") if k in request]
    completion_tokens = min([usage["completion_tokens"], *limits])
    prompt_tokens = min(usage["prompt_tokens"], request_bytes)
    clipped = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {**answer, "usage": clipped}


class FakeProviderServer:
    """An OpenAI-compatible provider on 127.0.0.1 that plays ``script`` in order, then repeats
    its last reply, and remembers every request it received."""

    completion = staticmethod(completion)
    error = staticmethod(provider_error)

    def __init__(self) -> None:
        self.script: list[ScriptedReply] = [completion()]
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw or b"{}")
                reply = fake._next(dict(self.headers.items()), body)
                data = json.dumps(_honest(reply.body, body, len(raw))).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next(self, headers: dict[str, str], body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            self.requests.append(({k.lower(): v for k, v in headers.items()}, body))
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def __enter__(self) -> FakeProviderServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
