"""The run's services (``RuntimeDescriptor.services``): opened once, around every agent's life."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from controller.agents.runtime import RuntimeDescriptor
from controller.run.platform import RunPlacement
from controller.run.progress import NO_PROGRESS, Progress
from controller.services import (
    EventAppender,
    LocalModelStarter,
    RunService,
    ServiceGrant,
    ServiceScope,
)


class RunServices:
    """The distinct services the roster lists; what they grant each agent; what they report."""

    def __init__(self, roster: Mapping[str, RuntimeDescriptor]) -> None:
        users: dict[RunService, dict[str, RuntimeDescriptor]] = {}
        for name, descriptor in roster.items():
            for service in descriptor.services:
                users.setdefault(service, {})[name] = descriptor
        self._users = users
        self._grants: list[ServiceGrant] = []
        self.reports: dict[str, Any] = {}
        """What the services reported for the run's result, once they closed."""

    @asynccontextmanager
    async def open(
        self,
        placement: RunPlacement,
        *,
        host: str,
        ledger: EventAppender,
        start_local_model: LocalModelStarter | None = None,
        progress: Progress = NO_PROGRESS,
    ) -> AsyncIterator[RunServices]:
        """Open every service in roster order; on leaving, collect the reports, then close them."""
        async with AsyncExitStack() as stack:
            for service, agents in self._users.items():
                progress.phase(f"starting run service {type(service).__name__}")
                scope = ServiceScope(
                    placement.run_id, placement.run_dir, host, agents, ledger, start_local_model
                )
                self._grants.append(await stack.enter_async_context(service.open(scope)))
            try:
                yield self
            finally:
                for grant in self._grants:
                    self.reports.update(grant.report())

    def descriptor_for(self, agent: str, descriptor: RuntimeDescriptor) -> RuntimeDescriptor:
        """``descriptor`` with the variables the services granted ``agent`` added."""
        granted = {
            name: value
            for grant in self._grants
            for name, value in grant.environment.get(agent, {}).items()
        }
        if not granted:
            return descriptor
        return dataclasses.replace(descriptor, environment={**descriptor.environment, **granted})

    def secrets_for(self, agent: str) -> dict[str, str]:
        """The secrets-file entries the services granted ``agent``."""
        return {
            name: value
            for grant in self._grants
            for name, value in grant.credentials.get(agent, {}).items()
        }
