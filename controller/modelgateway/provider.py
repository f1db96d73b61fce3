"""One model provider as the gateway reaches it: key, pacing, retries, error classes."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from controller.modelgateway.anthropic_provider import (
    ANTHROPIC_VERSION,
    chat_completion_of,
    messages_request,
)
from controller.modelgateway.budget import COMPLETION_FIELDS
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import ErrorClass

RETRY_AFTER_CAP_S = 60.0
_DETAIL_CHARS = 300
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


class ApiKey:
    """A provider key value; its repr and str never show the value."""

    __slots__ = ("_value", "name")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self._value = value

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        return text.replace(self._value, f"[{self.name} redacted]") if self._value else text

    def __repr__(self) -> str:
        return f"ApiKey(name={self.name!r}, value=<hidden>)"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class ProviderReply:
    body: bytes
    payload: dict[str, Any]
    attempts: int


class ProviderCallFailed(Exception):
    """A call failed for good (not retryable, or out of attempts); ``detail`` holds no secret."""

    def __init__(
        self, error_class: ErrorClass, status: int | None, detail: str, attempts: int
    ) -> None:
        super().__init__(f"{error_class} (status {status}): {detail}")
        self.error_class: ErrorClass = error_class
        self.status = status
        self.detail = detail
        self.attempts = attempts


def classify_status(status: int, payload: object) -> ErrorClass:
    """The error class of a non-2xx provider answer."""
    if status in (401, 403):
        return "auth"
    if status == 402 or (status == 429 and _quota_code(payload) is not None):
        return "quota"
    if status == 429:
        return "rate_limit"
    return "unknown"


def _retryable(error_class: ErrorClass, status: int | None) -> bool:
    return error_class in ("rate_limit", "network") or (status is not None and status >= 500)


class ProviderConnection:
    """Forwards chat completions to one provider, paced, with timeouts and retries."""

    def __init__(self, config: ProviderConfig, key: ApiKey | None) -> None:
        self.config = config
        self._key = key
        self._limiter = anyio.CapacityLimiter(config.max_concurrency)
        self._pace_lock = anyio.Lock()
        self._next_start = 0.0
        headers = _auth_headers(config, key)
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=min(10.0, config.timeout_s)),
            limits=httpx.Limits(max_connections=config.max_concurrency),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def chat_completion(self, request: dict[str, Any]) -> ProviderReply:
        """The provider's answer to one chat completion, or ``ProviderCallFailed``."""
        request = self._with_limit_field(request)
        path, body = "/chat/completions", request
        if self.config.api == "anthropic-messages":
            path, body = "/messages", messages_request(request)
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                async with self._limiter:
                    await self._pace()
                    with anyio.fail_after(self.config.timeout_s):
                        response = await self._client.post(path, json=body)
            except (httpx.TransportError, TimeoutError) as exc:
                failure = ProviderCallFailed("network", None, self._describe(exc), attempt)
            else:
                payload = _json_or_none(response.content)
                if response.is_success and isinstance(payload, dict):
                    if self.config.api == "anthropic-messages":
                        payload = chat_completion_of(payload)
                        return ProviderReply(json.dumps(payload).encode(), payload, attempt)
                    return ProviderReply(response.content, payload, attempt)
                if response.is_success:
                    failure = ProviderCallFailed(
                        "unknown", response.status_code, "provider answered non-JSON", attempt
                    )
                else:
                    failure = ProviderCallFailed(
                        classify_status(response.status_code, payload),
                        response.status_code,
                        self._error_detail(response, payload),
                        attempt,
                    )
                    retry_after = _retry_after_s(response.headers.get("retry-after"))
            if attempt >= self.config.max_attempts or not _retryable(
                failure.error_class, failure.status
            ):
                raise failure
            await anyio.sleep(self._backoff_s(attempt, retry_after))

    def _with_limit_field(self, request: dict[str, Any]) -> dict[str, Any]:
        field = self.config.limit_field
        limits = [v for k in COMPLETION_FIELDS if isinstance(v := request.get(k), int)]
        if field is None or not limits or isinstance(request.get(field), int):
            return request
        return {**request, field: min(limits)}

    async def _pace(self) -> None:
        if self.config.min_interval_s <= 0:
            return
        async with self._pace_lock:
            now = anyio.current_time()
            if self._next_start > now:
                await anyio.sleep(self._next_start - now)
            self._next_start = max(now, self._next_start) + self.config.min_interval_s

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        ceiling = min(
            self.config.backoff_max_s, self.config.backoff_initial_s * 2.0 ** (attempt - 1)
        )
        delay = ceiling * random.uniform(0.5, 1.0)  # jitter spreads agents that failed together
        if retry_after is not None:
            delay = max(delay, min(retry_after, RETRY_AFTER_CAP_S))
        return delay

    def _describe(self, exc: BaseException) -> str:
        kind = "timed out" if isinstance(exc, TimeoutError | httpx.TimeoutException) else "failed"
        return self._clean(f"request to provider {self.config.name!r} {kind}: {exc!r}")

    def _error_detail(self, response: httpx.Response, payload: object) -> str:
        message: object = None
        if isinstance(payload, dict):
            error = payload.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            message = message or payload.get("detail") or payload.get("message")
        if not isinstance(message, str) or not message:
            message = response.text
        return self._clean(f"HTTP {response.status_code}: {message}")

    def _clean(self, text: str) -> str:
        if self._key is not None:
            text = self._key.redact(text)
        return text[:_DETAIL_CHARS]


def _auth_headers(config: ProviderConfig, key: ApiKey | None) -> dict[str, str]:
    if key is None:
        return {}
    if config.api == "anthropic-messages":
        return {"x-api-key": key.reveal(), "anthropic-version": ANTHROPIC_VERSION}
    return {"authorization": f"Bearer {key.reveal()}"}


def _quota_code(payload: object) -> str | None:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if not isinstance(error, dict):
        return None
    for field in ("code", "type"):
        value = error.get(field)
        if isinstance(value, str) and value in _QUOTA_CODES:
            return value
    return None


def _json_or_none(content: bytes) -> object:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _retry_after_s(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the exponential backoff is good enough
