"""What a module hands the controller to act on with the operator's means, checked against the
operator's settings before anything starts: the credentials its agents name from the controller's
environment, and the model providers its agents' gateway would call (and send a key to).

A RunSpec is the module's data: naming ``SecretRef(env="TEMPORAL_API_KEY")`` or a provider at any
URL would otherwise hand the controller's own settings to an agent, or to that URL. Only names the
operator lists (``SOCIETY_CREDENTIALS``, ``society run --credential NAME``) resolve, and only the
named providers' base URLs and those the operator lists (``SOCIETY_PROVIDER_URLS``) are called.
"""

from __future__ import annotations

from collections.abc import Mapping

import controller.settings as settings
from controller.agents.runtime import RuntimeDescriptor
from controller.errors import SetupError
from controller.modelgateway.config import NAMED_PROVIDERS, ProviderConfig


class HandoverRefused(SetupError):
    """A roster names a credential or a provider the operator did not allow; nothing started."""

    reason = "handover-refused"


def check_handover(
    agents: Mapping[str, RuntimeDescriptor], env: settings.Settings | None = None
) -> None:
    """Refuse (``HandoverRefused``) a credential reference to a variable the operator did not
    allow, and a model provider at a URL the operator did not allow or with a key they did not."""
    env = env or settings.current()
    allowed = env.listed(settings.CREDENTIALS)
    urls = {_url(p.base_url) for p in NAMED_PROVIDERS.values()} | {
        _url(url) for url in env.listed(settings.PROVIDER_URLS)
    }
    for name, descriptor in agents.items():
        for credential, ref in descriptor.credentials.items():
            if ref.env is not None and ref.env not in allowed:
                raise HandoverRefused(
                    f"agent {name!r} asks for the controller's variable {ref.env} as its "
                    f"credential {credential}, which the operator did not allow",
                    reason="credential-not-allowed",
                    next_step=f"allow it with `society run --credential {ref.env}` (or "
                    f"{settings.CREDENTIALS.name}={ref.env}), or drop the reference",
                )
        provider = getattr(descriptor, "model_provider", None)
        if isinstance(provider, ProviderConfig):
            if _url(provider.base_url) not in urls:
                raise HandoverRefused(
                    f"agent {name!r} names the model provider {provider.base_url}, which the "
                    "operator did not allow the run's gateway to call",
                    reason="provider-not-allowed",
                    next_step=f"allow it with {settings.PROVIDER_URLS.name}={provider.base_url}, "
                    "or use a named provider",
                )
            if provider.api_key_name is not None and provider.api_key_name not in allowed:
                raise HandoverRefused(
                    f"agent {name!r}'s provider {provider.name} would be sent the controller's "
                    f"variable {provider.api_key_name} as its key, which the operator did not "
                    "allow",
                    reason="credential-not-allowed",
                    next_step=f"allow it with `society run --credential {provider.api_key_name}`"
                    f" (or {settings.CREDENTIALS.name}={provider.api_key_name})",
                )


def _url(url: str) -> str:
    return url.strip().rstrip("/")
