"""The model gateway as a run service: one gateway per run, shared by its model-using agents.

When some agent names no provider, the run also serves the local SmolLM2 model (one server for
the whole run). Each agent gets the gateway's URL and its model id as environment variables and
its own token in its secrets file; the gateway records every call in the run's ledger, and the
run's result gets the gateway's usage summary. Provider keys stay in the controller.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from controller.errors import ModelGatewayError
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import ModelGatewayStarted, ServedProvider
from controller.services import RunService, ServiceGrant, ServiceScope
from controller.settings import current
from society_sandbox.runtimes.llm import (
    GATEWAY_TOKEN_CREDENTIAL,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
)

MODEL_SERVER_LOG = "model-server.log"
"""The local model server's output, in the run's directory."""
PRODUCER = "model-gateway"


@runtime_checkable
class ModelUser(Protocol):
    """A runtime descriptor whose agents call models through the run's gateway."""

    @property
    def model_provider(self) -> ProviderConfig | None:
        """Its provider; ``None`` for the run's local model."""

    @property
    def model_token_budget(self) -> int | None:
        """Prompt + completion tokens the gateway allows it; ``None``: no limit."""


class ModelServiceError(ModelGatewayError):
    """The run's model service cannot start; ``reason`` is machine-readable."""

    reason = "model-service-failed"


# The gateway sends the local server as many calls at once as it has slots; the others queue in
# the gateway, where waiting does not count against an attempt's timeout. Sent at once to a
# one-slot server, a queued call's wait counted, and two OpenClaw turns (~2k prompt tokens each)
# timed out and were retried while the server still worked on the abandoned one.
LOCAL_TIMEOUT_S = 300.0
"""One local call on a loaded 2-core machine: an OpenClaw turn took up to ~90 s here."""
LOCAL_MAX_COMPLETION_TOKENS = 1024
"""The llm runtime's own reply ceiling, a bound on any one call holding the one server."""


@dataclass(frozen=True)
class ModelService(RunService):
    """One ``ModelGateway`` for the run, in front of its agents' providers and, when one of them
    names none, of the local model server that the platform starts and stops with the run.

    ``local_slots``: how many calls the local server decodes at once; ``None``: one per agent
    that uses it, as many as the machine can serve (the platform sizes it).
    """

    local_n_ctx: int = 2048
    local_slots: int | None = 1

    @asynccontextmanager
    async def open(self, scope: ServiceScope) -> AsyncIterator[ServiceGrant]:
        from controller.modelgateway.gateway import ModelGateway

        users = _users(scope.agents)
        async with AsyncExitStack() as stack:
            local: ProviderConfig | None = None
            credentials: Mapping[str, str] | None = None  # None: the controller's environment
            local_users = sum(1 for user in users.values() if user.model_provider is None)
            if local_users:
                # A model server is a process: the platform, which owns processes, starts it.
                if scope.start_local_model is None:
                    raise ModelServiceError(
                        "an agent names no model provider, and this platform serves no local "
                        "model; give every llm agent a provider",
                        reason="local-model-unavailable",
                    )
                server = await stack.enter_async_context(
                    scope.start_local_model(
                        self.local_n_ctx,
                        Path(scope.run_dir) / MODEL_SERVER_LOG,
                        parallel=self.local_slots or local_users,
                    )
                )
                local = ProviderConfig(
                    name="local",
                    base_url=server.base_url,
                    model=server.model_id,
                    api_key_name=server.api_key_name,
                    max_concurrency=server.slots,
                    timeout_s=LOCAL_TIMEOUT_S,
                    max_completion_tokens=LOCAL_MAX_COMPLETION_TOKENS,
                    limit_field="max_tokens",
                )
                credentials = ChainMap(dict(server.credentials), dict(current().environ))
            model_of, providers = _providers(users, local)
            gateway = await stack.enter_async_context(
                ModelGateway(
                    list(providers.values()),
                    ledger=scope.ledger,
                    credentials=credentials,
                    host=scope.host,
                )
            )
            tokens = {
                name: gateway.issue_token(name, token_budget=user.model_token_budget)
                for name, user in users.items()
            }
            await scope.ledger.append(
                ModelGatewayStarted(
                    providers=[
                        ServedProvider(
                            name=p.name,
                            model=p.model,
                            base_url=p.base_url,
                            api_key_name=p.api_key_name,
                            local=p is local,
                        )
                        for p in providers.values()
                    ],
                    agents=model_of,
                ),
                producer=PRODUCER,
            )

            def report() -> Mapping[str, Any]:
                return {"usage": gateway.usage_summary().model_dump(mode="json", by_alias=True)}

            yield ServiceGrant(
                environment={
                    name: {GATEWAY_URL_VARIABLE: gateway.base_url, MODEL_VARIABLE: model}
                    for name, model in model_of.items()
                },
                credentials={name: {GATEWAY_TOKEN_CREDENTIAL: t} for name, t in tokens.items()},
                report=report,
            )


MODEL_SERVICE = ModelService(local_slots=None)
"""The llm runtime's model service; every llm agent of a run lists it, so the run opens it once.
Its local server has a slot per agent, as far as the machine allows."""


def _users(agents: Mapping[str, object]) -> dict[str, ModelUser]:
    users: dict[str, ModelUser] = {}
    for name, descriptor in agents.items():
        if not isinstance(descriptor, ModelUser):
            raise ModelServiceError(
                f"agent {name!r} lists the model service, but its descriptor "
                f"{type(descriptor).__name__} names no model provider",
                reason="not-a-model-user",
            )
        users[name] = descriptor
    return users


def _providers(
    users: Mapping[str, ModelUser], local: ProviderConfig | None
) -> tuple[dict[str, str], dict[str, ProviderConfig]]:
    """Each agent's model, and one provider per model (the gateway routes by model id)."""
    model_of: dict[str, str] = {}
    providers: dict[str, ProviderConfig] = {}
    for name, user in users.items():
        provider = user.model_provider or local
        assert provider is not None
        known = providers.setdefault(provider.model, provider)
        if known != provider:
            raise ModelServiceError(
                f"agents name two different providers for model {provider.model!r} "
                f"({known.name!r} and {provider.name!r}); give each model one provider",
                reason="duplicate-model",
            )
        model_of[name] = provider.model
    return model_of, providers
