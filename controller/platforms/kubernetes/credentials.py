"""An agent's credential references resolved to values: from the controller's environment, or
a Secret in the credentials namespace read by name (never listed), each Secret once per run."""

from __future__ import annotations

import base64

import controller.settings as settings
from controller.platforms.kubernetes import rbac
from controller.platforms.kubernetes.kube import Kube, KubeError, Obj
from controller.run.platform import AgentLaunch, SandboxStartError


class CredentialResolver:
    """One run's reader of credential values; raises ``SandboxStartError`` for missing ones."""

    def __init__(self, kube: Kube, run_id: str, namespace: str) -> None:
        self.kube = kube
        self.run_id = run_id
        self.namespace = namespace
        self._secrets_read: dict[str, Obj] = {}
        """Credential Secrets read by name, once per run (an absent one as ``{}``)."""

    async def values(self, launch: AgentLaunch) -> dict[str, str]:
        """The values of the agent's credential references."""
        values: dict[str, str] = {}
        missing: list[str] = []
        for name, ref in launch.descriptor.credentials.items():
            if ref.secret:
                value, why = await self._secret_value(ref.secret, ref.key or name)
            else:
                value = settings.current().get(ref.env) if ref.env else None
                why = f"the controller's environment has no {ref.env}"
            if value is None:
                missing.append(f"{name}: {why}")
            else:
                values[name] = value
        if missing:
            raise SandboxStartError(
                f"credentials for {launch.name} are not available to the controller: "
                f"{'; '.join(missing)}",
                reason="credential-missing",
            )
        return values

    async def _secret_value(self, secret: str, key: str) -> tuple[str | None, str]:
        namespace = self.namespace
        found = self._secrets_read.get(secret)
        if found is None:
            try:
                found = await self.kube.get("Secret", secret, namespace) or {}
            except KubeError as exc:
                if exc.status != 403:
                    raise
                return None, (
                    f"the controller may not read Secret {namespace}/{secret} (is the run's "
                    f"RoleBinding {rbac.credentials_binding_name(self.run_id)} there? the Role "
                    f"{rbac.CREDENTIALS_READER} must exist in {namespace})"
                )
            self._secrets_read[secret] = found
        if not found:
            return None, f"Secret {namespace}/{secret} does not exist"
        data = found.get("data") or {}
        if key not in data:
            return None, f"Secret {namespace}/{secret} has no key {key!r}"
        return base64.b64decode(data[key]).decode("utf-8"), ""
