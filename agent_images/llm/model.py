"""The agent's way to a model: the run's gateway, with the agent's own per-run token."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx

ENDED_CODE = "model_use_ended"
"""The gateway's error code once this agent may make no more calls (budget, auth, quota)."""


class ModelCallError(Exception):
    """A model call failed after the gateway's own retries; ``ended`` means: stop calling."""

    def __init__(self, detail: str, *, status: int | None, code: str | None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code

    @property
    def ended(self) -> bool:
        return self.code == ENDED_CODE or self.status in (401, 403)


@dataclass(frozen=True, slots=True)
class Completion:
    """The model's answer and the token counts the gateway passed back (``None``: unknown)."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None


CALL_TIMEOUT_S = 900.0
"""A backstop only: a call waits in the gateway's queue behind other agents' calls (a hundred
agents share the local server's slots), and the gateway bounds each attempt itself."""


class ModelClient:
    """``async with ModelClient(url, token, model) as model: await model.complete(...)``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        model: str,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        unix_socket: str | None = None,
    ) -> None:
        self.model = model
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            transport=httpx.AsyncHTTPTransport(uds=unix_socket) if unix_socket else None,
            headers={"authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.aclose()

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int,
        temperature: float,
        seed: int | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = seed
        try:
            response = await self._client.post("/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise ModelCallError(
                f"the model gateway is unreachable: {type(exc).__name__}", status=None, code=None
            ) from None
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code != 200 or not isinstance(payload, dict):
            error = payload.get("error") if isinstance(payload, dict) else None
            error = error if isinstance(error, dict) else {}
            raise ModelCallError(
                str(error.get("message") or f"HTTP {response.status_code}"),
                status=response.status_code,
                code=error.get("code") if isinstance(error.get("code"), str) else None,
            )
        choice = (payload.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        usage = payload.get("usage") or {}
        return Completion(
            text=str(message.get("content") or ""),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            finish_reason=choice.get("finish_reason"),
        )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
