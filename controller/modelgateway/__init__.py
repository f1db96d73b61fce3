"""The controller's model gateway: agents' only way to a model, with usage measured per agent.

The local SmolLM2 server it fronts by default is ``controller.platforms.local_model`` (it spawns a
process). Public names load lazily, so importing this package does not load httpx or h11.
"""

from __future__ import annotations

from controller._lazy import lazy_exports

_EXPORTS = {
    "ModelGateway": "controller.modelgateway.gateway",
    "ModelGatewayError": "controller.errors",
    "LedgerAppender": "controller.modelgateway.gateway",
    "ProviderConfig": "controller.modelgateway.config",
    "named_provider": "controller.modelgateway.config",
    "AgentModelUsage": "controller.modelgateway.events",
    "AgentModelCallFailed": "controller.modelgateway.events",
    "AgentModelBudgetReached": "controller.modelgateway.events",
    "ModelGatewayStarted": "controller.modelgateway.events",
    "model_gateway_catalog": "controller.modelgateway.events",
    "ModelService": "controller.modelgateway.service",
    "MODEL_SERVICE": "controller.modelgateway.service",
    "UsageSummary": "controller.modelgateway.usage",
    "AgentUsage": "controller.modelgateway.usage",
    "ModelPrice": "controller.modelgateway.pricing",
    "PRICES": "controller.modelgateway.pricing",
    "cost_usd": "controller.modelgateway.pricing",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
