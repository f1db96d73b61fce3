"""The model gateway: an OpenAI-compatible endpoint on loopback between agents and providers.

It also answers Anthropic Messages (``/v1/messages``, ``anthropic_messages``) through the same chat
path; an agent's token comes as ``Authorization: Bearer`` or as an Anthropic client's ``x-api-key``.

Agents hold only a per-run bearer token; the gateway holds the provider keys, forwards each call,
measures it and writes one ledger event per call. An ``auth`` or ``quota`` failure ends that
agent's model use for the rest of the run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from types import TracebackType
from typing import Any, Protocol, Self

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from controller.errors import ModelGatewayError as ModelGatewayError
from controller.modelgateway._http import (
    REQUEST_TIMEOUT_S,
    HttpHead,
    HttpRequest,
    HttpResponse,
    refuse_unread,
    serve_connection,
)
from controller.modelgateway.admission import (
    DEFAULT_GATEWAY_LIMITS,
    GatewayBounds,
    GatewayLimits,
    PeerConnection,
)
from controller.modelgateway.answers import (
    ended_message,
    error_response,
    status_for,
    unauthorized,
)
from controller.modelgateway.anthropic_messages import MESSAGES_PATH, messages_call
from controller.modelgateway.anthropic_messages import not_found as anthropic_not_found
from controller.modelgateway.budget import RequestRefused, TokenBudget, shape
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import (
    ENDS_MODEL_USE,
    AgentModelBudgetReached,
    AgentModelCallFailed,
    AgentModelUsage,
)
from controller.modelgateway.pricing import PRICES, ModelPrice, cost_usd
from controller.modelgateway.provider import ApiKey, ProviderCallFailed, ProviderConnection
from controller.modelgateway.usage import UsageSummary, UsageTally, summarize
from controller.settings import current
from ledger import Event

PRODUCER = "model-gateway"

_log = logging.getLogger("controller.modelgateway")


class LedgerAppender(Protocol):
    """Where the gateway's events go: a ``LedgerWriter`` or anything with its ``append``."""

    async def append(self, event: Event, *, producer: str) -> object: ...


class ModelGateway:
    """OpenAI-compatible ``/v1/chat/completions`` and ``/v1/models`` on ``base_url``.

    Use as ``async with ModelGateway([...], ledger=writer) as gateway``; give each agent
    ``gateway.base_url`` and ``gateway.issue_token(name)``. Provider keys are looked up by name in
    ``credentials`` (default: the environment) when the gateway starts.
    """

    def __init__(
        self,
        providers: Sequence[ProviderConfig],
        *,
        ledger: LedgerAppender,
        prices: Mapping[str, ModelPrice] = PRICES,
        credentials: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        limits: GatewayLimits = DEFAULT_GATEWAY_LIMITS,
    ) -> None:
        if not providers:
            raise ModelGatewayError("give the gateway at least one provider", reason="no-provider")
        models = [provider.model for provider in providers]
        if len(set(models)) != len(models):
            raise ModelGatewayError(
                f"two providers serve the same model id ({models}); give each model one provider",
                reason="duplicate-model",
            )
        self._providers = list(providers)
        self._ledger = ledger
        self._prices = prices
        self._credentials = credentials
        self._host = host
        self._port = port
        self._request_timeout_s = request_timeout_s
        self.bounds = GatewayBounds(limits)
        self._connections: dict[str, ProviderConnection] = {}
        self._agent_by_digest: dict[bytes, str] = {}
        self._digest_by_agent: dict[str, bytes] = {}
        self._tallies: dict[str, UsageTally] = {}
        self._budgets: dict[str, TokenBudget] = {}
        self._ended: dict[str, str] = {}
        self._stack: AsyncExitStack | None = None
        self._task_group: TaskGroup | None = None
        self._bound_port: int | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI client takes as its base URL."""
        if self._bound_port is None:
            raise RuntimeError("the gateway is not serving; use it inside 'async with'")
        return f"http://{self._host}:{self._bound_port}/v1"

    def issue_token(self, agent: str, *, token_budget: int | None = None) -> str:
        """A fresh 256-bit bearer token for ``agent``; a token issued to it before stops working.

        With ``token_budget``, a call is forwarded only if its worst case fits in what is left
        (see ``budget``); the first call that does not fit is refused and recorded
        (``AgentModelBudgetReached``), and so are all later calls.
        """
        if token_budget is not None:
            budget = self._budgets.setdefault(agent, TokenBudget(token_budget))
            budget.limit = token_budget
        token = secrets.token_urlsafe(32)
        digest = _digest(token)
        old = self._digest_by_agent.pop(agent, None)
        if old is not None:
            del self._agent_by_digest[old]
        self._agent_by_digest[digest] = agent
        self._digest_by_agent[agent] = digest
        self._tallies.setdefault(agent, UsageTally())
        return token

    def usage_summary(self) -> UsageSummary:
        """Calls, tokens and cost per agent and in total; ``None`` where a figure is unknown."""
        return summarize(self._tallies)

    async def __aenter__(self) -> Self:
        keys = {provider.name: self._key_for(provider) for provider in self._providers}
        connections: dict[str, ProviderConnection] = {}
        async with AsyncExitStack() as stack:
            for provider in self._providers:
                connection = ProviderConnection(provider, keys[provider.name])
                stack.push_async_callback(connection.aclose)
                connections[provider.model] = connection
            self._connections = connections
            listener = await anyio.create_tcp_listener(local_host=self._host, local_port=self._port)
            stack.push_async_callback(listener.aclose)
            self._bound_port = listener.extra(SocketAttribute.local_port)
            self._task_group = await stack.enter_async_context(anyio.create_task_group())
            self._task_group.start_soon(listener.serve, self._serve)
            self._stack = stack.pop_all()
        _log.info("model gateway serving on %s", self.base_url)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._stack is not None and self._task_group is not None
        self._task_group.cancel_scope.cancel()
        stack, self._stack, self._task_group = self._stack, None, None
        self._bound_port = None
        self._connections.clear()
        await stack.aclose()

    def _key_for(self, provider: ProviderConfig) -> ApiKey | None:
        if provider.api_key_name is None:
            return None
        source = current().environ if self._credentials is None else self._credentials
        value = source.get(provider.api_key_name)
        if not value:
            raise ModelGatewayError(
                f"provider {provider.name!r} needs the credential {provider.api_key_name!r}, "
                f"which is not set; set it in the controller's environment",
                reason="credential-missing",
            )
        return ApiKey(provider.api_key_name, value)

    async def _serve(self, stream: SocketStream) -> None:
        peer = self.bounds.open()  # counted from accept: see ``admission``
        if isinstance(peer, HttpResponse):
            await refuse_unread(stream, peer)
            return
        try:
            await serve_connection(
                stream,
                self._handle,
                admit=lambda head: self._admit(head, peer),
                timeout_s=self._request_timeout_s,
            )
        finally:
            peer.close()

    def _admit(self, head: HttpHead, peer: PeerConnection) -> HttpResponse | PeerConnection:
        """The token is checked on the request's head: no body is read for an unknown one, and
        one over its agent's bounds is refused before its body too."""
        agent = self._authenticate(_credential(head.headers))
        if agent is None:
            return unauthorized()
        return peer.attribute(agent) or peer

    async def _handle(self, request: HttpRequest) -> HttpResponse:
        agent = self._authenticate(_credential(request.headers))
        if agent is None:  # admitted on its head, revoked while its body arrived
            return unauthorized()
        if request.path == MESSAGES_PATH and request.method == "POST":
            return await messages_call(request.body, partial(self._chat_completion, agent))
        if request.path.startswith(MESSAGES_PATH):
            return anthropic_not_found(request.method, request.path)
        if request.path == "/v1/models" and request.method == "GET":
            return HttpResponse.json(200, self._models())
        if request.path == "/v1/chat/completions" and request.method == "POST":
            return await self._chat_completion(agent, request.body)
        if request.path in ("/v1/models", "/v1/chat/completions"):
            return error_response(405, f"{request.method} is not allowed on {request.path}", None)
        return error_response(
            404,
            f"no route {request.path}; the gateway serves /v1/chat/completions and /v1/models",
            None,
        )

    def _authenticate(self, header: str) -> str | None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        # Look up by digest so lookup timing says nothing about the token, then compare in
        # constant time.
        digest = _digest(token.strip())
        agent = self._agent_by_digest.get(digest)
        if agent is None or not hmac.compare_digest(self._digest_by_agent[agent], digest):
            return None
        return agent

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": p.model, "object": "model", "created": 0, "owned_by": p.name}
                for p in self._providers
            ],
        }

    async def _chat_completion(self, agent: str, body: bytes) -> HttpResponse:
        tally = self._tallies[agent]
        ended = self._ended.get(agent)
        if ended is not None:
            tally.refused_calls += 1
            return error_response(403, ended, "model_use_ended")
        try:
            request = json.loads(body, parse_constant=_not_json)
            # what was read must be forwardable: escapes can spell a lone surrogate, not UTF-8
            json.dumps(request, ensure_ascii=False).encode("utf-8")
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json parses
            return error_response(
                400, "the request body is not JSON text that UTF-8 can carry", "invalid_json"
            )
        if not isinstance(request, dict):
            return error_response(400, "the request body must be a JSON object", "invalid_json")
        if request.get("stream"):
            return error_response(
                400, 'the model gateway does not stream; send "stream": false', "stream_unsupported"
            )
        model = request.get("model") or self._providers[0].model
        connection = self._connections.get(model) if isinstance(model, str) else None
        if connection is None:
            offered = ", ".join(self._connections)
            return error_response(
                404,
                f"model {model!r:.80} is not offered; choose one of: {offered}",
                "model_not_found",
            )
        provider = connection.config
        budget = self._budgets.get(agent)
        try:
            shaped, reservation = shape(
                request, body_bytes=len(body), cap=provider.max_completion_tokens, budget=budget
            )
        except RequestRefused as refused:
            tally.refused_calls += 1
            if budget is not None and refused.code == "token_budget":
                await self._end_for_budget(agent, tally, budget, str(refused))
                return error_response(403, self._ended[agent], "model_use_ended")
            return error_response(refused.status, str(refused), refused.code)
        started = time.perf_counter()
        charged: int | None = None  # None: nothing is known to have run at the provider
        try:
            try:
                reply = await connection.chat_completion({**shaped, "model": provider.model})
            except ProviderCallFailed as failure:
                if failure.error_class == "network" and reservation is not None:
                    charged = reservation.tokens  # it may have run: count the worst case
                return await self._failed(agent, provider, failure, _ms_since(started))
            usage = reply.payload.get("usage")
            prompt_tokens = _count(usage, "prompt_tokens")
            completion_tokens = _count(usage, "completion_tokens")
            if reservation is not None:
                charged = reservation.charge(prompt_tokens, completion_tokens)
        finally:
            if budget is not None and reservation is not None:
                if budget.settle(reservation, charged):
                    _log.warning("provider reported more than the worst case agent=%s", agent)
        event = AgentModelUsage(
            agent=agent,
            provider=provider.name,
            model=provider.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_ms=_ms_since(started),
            cost_usd=cost_usd(provider.model, prompt_tokens, completion_tokens, self._prices),
            attempts=reply.attempts,
        )
        tally.add_usage(event)
        await self._ledger.append(event, producer=PRODUCER)
        if budget is not None and budget.spent:
            await self._end_for_budget(agent, tally, budget, "its budget is spent")
        _log.info(
            "model call agent=%s model=%s prompt_tokens=%s completion_tokens=%s "
            "latency_ms=%.1f cost_usd=%s attempts=%d",
            agent,
            provider.model,
            prompt_tokens,
            completion_tokens,
            event.latency_ms,
            event.cost_usd,
            reply.attempts,
        )
        return HttpResponse(200, reply.body)

    async def _end_for_budget(
        self, agent: str, tally: UsageTally, budget: TokenBudget, why: str
    ) -> None:
        if agent in self._ended:
            return
        self._ended[agent] = (
            f"model use ended for agent {agent!r}: its token budget of {budget.limit} cannot "
            f"cover another call ({why}; {budget.charged} tokens charged); later calls are "
            f"refused for the rest of this run"
        )
        tally.ended_by = "token_budget"
        await self._ledger.append(
            AgentModelBudgetReached(
                agent=agent,
                budget_tokens=budget.limit,
                used_tokens=budget.charged,
                calls=tally.calls,
            ),
            producer=PRODUCER,
        )
        _log.info(
            "model token budget reached agent=%s budget=%d charged=%d",
            agent,
            budget.limit,
            budget.charged,
        )

    async def _failed(
        self, agent: str, provider: ProviderConfig, failure: ProviderCallFailed, latency_ms: float
    ) -> HttpResponse:
        ends = failure.error_class in ENDS_MODEL_USE
        event = AgentModelCallFailed(
            agent=agent,
            provider=provider.name,
            model=provider.model,
            error_class=failure.error_class,
            status=failure.status,
            detail=failure.detail,
            ends_model_use=ends,
            latency_ms=latency_ms,
            attempts=failure.attempts,
        )
        self._tallies[agent].add_failure(event)
        message = (
            f"provider {provider.name!r} call failed ({failure.error_class}): {failure.detail}"
        )
        if ends:
            message = ended_message(agent, provider, failure)
            self._ended.setdefault(agent, message)
        await self._ledger.append(event, producer=PRODUCER)
        _log.warning(
            "model call failed agent=%s model=%s error_class=%s status=%s attempts=%d: %s",
            agent,
            provider.model,
            failure.error_class,
            failure.status,
            failure.attempts,
            failure.detail,
        )
        return error_response(status_for(failure), message, failure.error_class)


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")  # Python's json takes NaN and Infinity


def _credential(headers: Mapping[str, str]) -> str:
    """The agent's token as ``Authorization: Bearer``, or as an Anthropic client's ``x-api-key``."""
    if "authorization" in headers:
        return headers["authorization"]
    key = headers.get("x-api-key", "").strip()
    return f"Bearer {key}" if key else ""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _count(usage: object, field: str) -> int | None:
    value = usage.get(field) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
