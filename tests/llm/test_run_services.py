"""The kernel's run-service seam, with a stand-in service and scripted agents."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from llm_support import agent_pid, environment_of, verified

from controller import RunSpec
from controller.agents import RuntimeDescriptorError, scripted
from controller.agents.llm import llm
from controller.events.run import AgentRuntimeReady, PlatformFailed
from controller.platforms.local import LocalPlatform
from controller.platforms.local_model import start_local_model
from controller.run import PlatformLost, ProgramFinished, Run, RunContext, RunResult, Success
from controller.services import RunService, ServiceGrant, ServiceScope
from society_sandbox.runtimes.scripted import ScriptedPolicy

pytestmark = pytest.mark.anyio

JOURNAL: list[tuple[str, Any]] = []


class ServiceDown(Exception):
    reason = "service-down"


@dataclass(frozen=True)
class StandIn(RunService):
    fail: bool = False

    @asynccontextmanager
    async def open(self, scope: ServiceScope) -> AsyncIterator[ServiceGrant]:
        if self.fail:
            raise ServiceDown("the stand-in service cannot start")
        JOURNAL.append(("open", sorted(scope.agents)))
        try:
            yield ServiceGrant(
                environment={n: {"ACME_SERVICE_URL": "http://acme.test"} for n in scope.agents},
                credentials={n: {"ACME_SERVICE_TOKEN": f"token-{n}"} for n in scope.agents},
                report=lambda: {"acme": {"served": sorted(scope.agents)}},
            )
        finally:
            alive = []
            for name in scope.agents:
                try:
                    alive.append(agent_pid(scope.run_id, name))
                except LookupError:
                    pass
            JOURNAL.append(("close", alive))


def with_service(service: Any) -> Any:
    return dataclasses.replace(scripted(ScriptedPolicy()), services=(service,))


async def test_a_service_opens_once_for_its_agents_grants_them_and_reports_after_they_ended(
    artifact_root: Path,
) -> None:
    JOURNAL.clear()
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> None:
        run_dir = Path(ctx.ledger.receipt().ledger_dir).parents[1]
        for name in ctx.agents:
            secrets_file = run_dir / "sandboxes" / name / "work" / ".society" / "secrets.json"
            seen[name] = json.loads(secrets_file.read_bytes())["credentials"]
            seen[f"{name} env"] = environment_of(agent_pid(ctx.ledger.run_id, name))

    spec = RunSpec.define(
        id="acme.services-test/v1",
        agents={
            "alice": with_service(StandIn()),
            "bob": with_service(StandIn()),
            "cy": scripted(ScriptedPolicy()),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert JOURNAL == [("open", ["alice", "bob"]), ("close", [])]
    assert seen["alice"] == {"ACME_SERVICE_TOKEN": "token-alice"} and seen["cy"] == {}
    assert b"ACME_SERVICE_URL=http://acme.test" in seen["bob env"]
    assert b"ACME_SERVICE_URL" not in seen["cy env"]
    ready = {e.agent: e.environment for e in verified(spec, outcome).events(AgentRuntimeReady)}
    assert ready == {"alice": ["ACME_SERVICE_URL"], "bob": ["ACME_SERVICE_URL"], "cy": []}
    assert outcome.reports == {"acme": {"served": ["alice", "bob"]}}
    assert RunResult.from_outcome(outcome).usage is None


async def test_a_service_that_cannot_start_loses_the_run_before_any_agent_starts(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    spec = RunSpec.define(
        id="acme.services-test/v1",
        agents={"alice": with_service(StandIn(fail=True))},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "service-down"
    ledger = verified(spec, outcome)
    assert list(ledger.events(AgentRuntimeReady)) == []
    [failed] = ledger.events(PlatformFailed)
    assert failed.reason == "service-down" and "cannot start" in failed.detail


class ServesNoLocalModel(LocalPlatform):
    """A platform that starts no local model server (as a platform may)."""

    def local_model(self) -> None:
        return None


async def test_the_platform_hands_the_local_model_server_down_to_the_model_service(
    artifact_root: Path,
) -> None:
    """The local model server is a process, so the platform starts it; the model service only
    gets the starter. Without one, an agent with no provider loses the run before it starts."""
    assert LocalPlatform().local_model() is start_local_model

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    spec = RunSpec.define(
        id="acme.services-test/v1", agents={"alice": llm("A local agent.")}, execute=execute
    )
    outcome = await Run.execute(spec, platform=ServesNoLocalModel(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "local-model-unavailable"
    assert list(verified(spec, outcome).events(AgentRuntimeReady)) == []


def test_a_descriptor_refuses_a_service_that_is_not_a_hashable_run_service() -> None:
    for bad in (object(), StandInWithList()):
        with pytest.raises(RuntimeDescriptorError) as raised:
            with_service(bad)
        assert raised.value.reason == "bad-service"


@dataclass(eq=True)
class StandInWithList(RunService):  # eq without frozen: unhashable, so it cannot be shared
    names: list[str] = dataclasses.field(default_factory=list)

    def open(self, scope: ServiceScope) -> Any:
        raise NotImplementedError
