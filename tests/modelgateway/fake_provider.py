"""A scripted OpenAI-compatible provider on 127.0.0.1, for gateway and llm runtime tests."""

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


def completion(prompt_tokens: int = 11, completion_tokens: int = 7) -> ScriptedReply:
    return ScriptedReply(
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


def provider_error(status: int, message: str, code: str | None = None) -> ScriptedReply:
    return ScriptedReply(status, {"error": {"message": message, "type": "error", "code": code}})


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
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = fake._next(dict(self.headers.items()), body)
                data = json.dumps(reply.body).encode()
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
