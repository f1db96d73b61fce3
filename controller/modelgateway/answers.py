"""What an agent is told when the gateway refuses or a provider call fails: OpenAI-shaped errors."""

from __future__ import annotations

from collections.abc import Sequence

from controller.modelgateway._http import HttpResponse
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import ENDS_MODEL_USE, ErrorClass
from controller.modelgateway.provider import ProviderCallFailed


def ended_message(agent: str, provider: ProviderConfig, failure: ProviderCallFailed) -> str:
    if failure.error_class == "auth":
        why = (
            f"provider {provider.name!r} rejected the gateway's credential "
            f"{provider.api_key_name!r} ({failure.detail})"
        )
    else:
        why = f"provider {provider.name!r} reports the account is out of quota ({failure.detail})"
    return (
        f"model use ended for agent {agent!r}: {why}; later calls are refused for the rest of "
        f"this run"
    )


def status_for(failure: ProviderCallFailed) -> int:
    error_class: ErrorClass = failure.error_class
    if error_class in ENDS_MODEL_USE:
        return 403
    if error_class == "rate_limit":
        return 429
    if error_class == "network":
        return 504 if "timed out" in failure.detail else 502
    if failure.status is not None and 400 <= failure.status < 500:
        return failure.status  # the provider refused the request itself: the agent should know
    return 502


def unauthorized() -> HttpResponse:
    return error_response(
        401,
        "unknown or missing agent token; send 'Authorization: Bearer <token>' with the "
        "token the gateway issued to this agent",
        "invalid_api_key",
        headers=[("www-authenticate", "Bearer")],
    )


def error_response(
    status: int, message: str, code: str | None, headers: Sequence[tuple[str, str]] = ()
) -> HttpResponse:
    return HttpResponse.json(
        status,
        {"error": {"message": message, "type": "model_gateway_error", "code": code}},
        headers,
    )
