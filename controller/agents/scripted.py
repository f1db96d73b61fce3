"""The ``scripted`` runtime, controller side: its descriptor and its bridge (``ScriptedOwner``).

The agent program is ``SCRIPTED_COMMAND``; it needs no model and no key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from controller.agents.bridge import BridgeOwner, OwnerError, attach_bridge
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    SecretRef,
    checked_options,
)
from society_sandbox.runtimes.scripted import POLICY_FILE, ScriptedPolicy

SCRIPTED_IMAGE = "society/scripted:dev"
"""The locally built image; cluster profiles need it pinned by digest (``image=...@sha256:...``)."""

SCRIPTED_COMMAND = ("python", "-m", "agent_images.scripted")
SCRIPTED_RESOURCES = Resources(cpu=0.02, memory_mib=64, memory_limit_mib=1536)
"""A scripted agent idles at ~40 MiB resident; 50 of them fit one core's admission budget."""


class ScriptedOwner(BridgeOwner):
    """The scripted agent's owner-local API: ``instruct``, ``state``, ``stop``."""

    async def instruct(self, text: str) -> None:
        """Hand the agent an owner instruction; its rules see it from sender ``owner``."""
        await self._call("instruct", text=text)

    async def stop(self) -> None:
        """Ask the agent to stop; it exits cleanly and its termination becomes ``Completed``."""
        await self._call("stop")


@dataclass(frozen=True, eq=False, kw_only=True)
class ScriptedRuntime(RuntimeDescriptor):
    """A scripted agent: follows ``policy`` deterministically, seeded by run seed + agent name."""

    runtime: ClassVar[str] = "scripted"

    policy: ScriptedPolicy = field(default_factory=ScriptedPolicy)
    image: str = SCRIPTED_IMAGE
    command: tuple[str, ...] = SCRIPTED_COMMAND
    resources: Resources = SCRIPTED_RESOURCES
    ready_timeout_s: float = 60.0

    def attach(
        self, access: SandboxAccess
    ) -> AbstractAsyncContextManager[Attachment[ScriptedOwner]]:
        return attach_bridge(
            access, ScriptedOwner, runtime="scripted", timeout_s=self.ready_timeout_s
        )

    async def stop(self, owner: Any) -> None:
        try:
            await owner.stop()
        except OwnerError:
            pass


@checked_options
def scripted(
    policy: ScriptedPolicy | None = None,
    *,
    image: str = SCRIPTED_IMAGE,
    resources: Resources | None = None,
    environment: Mapping[str, str] | None = None,
    files: Mapping[str, bytes | str] | None = None,
    credentials: Mapping[str, SecretRef] | None = None,
    harvest: Harvest | None = None,
    ready_timeout_s: float = 60.0,
) -> ScriptedRuntime:
    """A scripted runtime following ``policy`` (default: silent); its policy file is harvested."""
    policy = policy or ScriptedPolicy()
    given = {path: c.encode() if isinstance(c, str) else c for path, c in (files or {}).items()}
    if POLICY_FILE in given:
        raise RuntimeDescriptorError(f"{POLICY_FILE} is written from the policy", reason="bad-path")
    body = json.dumps(policy.model_dump(mode="json"), indent=2, sort_keys=True).encode()
    return ScriptedRuntime(
        policy=policy,
        image=image,
        resources=resources or SCRIPTED_RESOURCES,
        environment=dict(environment or {}),
        files={POLICY_FILE: body, **given},
        credentials=dict(credentials or {}),
        harvest=harvest or Harvest(files=(POLICY_FILE,)),
        ready_timeout_s=ready_timeout_s,
    )
