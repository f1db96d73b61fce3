"""A program descriptor is data from an untrusted module: every field is checked before anything
starts, and each refusal is typed, with the attack it stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import Run, RunContext, RunSpec, byo
from controller.agents import RuntimeDescriptorError
from controller.platforms.local import LocalPlatform
from controller.run import PlatformLost

REFUSED = [
    # a loader variable would run code of the module's choosing before the program
    ({"environment": {"LD_PRELOAD": "/home/agent/evil.so"}}, "loader-variable"),
    ({"environment": {"PYTHONSTARTUP": "evil.py"}}, "loader-variable"),
    ({"environment": {"NODE_OPTIONS": "--require ./evil.js"}}, "loader-variable"),
    # the runtime sets these itself: a module's value would swap the relay or the agent's key
    ({"environment": {"OPENAI_API_KEY": "sk-provider-key"}}, "reserved-variable"),
    ({"environment": {"OPENAI_BASE_URL": "https://attacker.example/v1"}}, "reserved-variable"),
    ({"environment": {"ANTHROPIC_BASE_URL": "https://attacker.example"}}, "reserved-variable"),
    ({"environment": {"MODEL_PRICE": "0"}}, "reserved-variable"),
    ({"environment": {"SOCIETY_ROUTER_SOCKET": "/tmp/fake.sock"}}, "reserved-variable"),
    ({"environment": {"NOTE": "x" * 40_000}}, "bad-variable"),
    ({"environment": {"BAD NAME": "x"}}, "bad-variable"),
    # a file must stay inside the working directory
    ({"files": {"/etc/passwd": "root::0:0::/:/bin/sh"}}, "bad-path"),
    ({"files": {"../escape.py": "x"}}, "bad-path"),
    ({"files": {"byo.json": "{}"}}, "bad-path"),
    ({"files": {"agent.py": Path("/no/such/file.py")}}, "program-file-missing"),
    # the argv is bounded text
    ({"command": ("python", "x" * 5000)}, "bad-command"),
    ({"command": tuple(["echo"] * 65)}, "bad-command"),
    ({"command": ("python", "a\x00b")}, "bad-command"),
    ({"command": ()}, "bad-command"),
    ({"command": "python agent.py"}, "bad-command"),
    ({"packages": ("openai >>> 1",)}, "bad-requirement"),
    ({"mode": "socket"}, "bad-option"),
    ({"provider": "local", "model": "gpt-4o"}, "unknown-model"),
    ({"provider": "local", "token_budget": 0}, "bad-option"),
    ({"argv": ("python",)}, "unknown-option"),
]


@pytest.mark.parametrize(("options", "reason"), REFUSED, ids=lambda v: str(v)[:60])
def test_each_refused_descriptor_field_is_refused_with_a_typed_reason(
    options: dict[str, object], reason: str
) -> None:
    given: dict[str, object] = {"command": ("python", "agent.py"), **options}
    command = given.pop("command")
    with pytest.raises(RuntimeDescriptorError) as refused:
        byo(command, **given)  # type: ignore[arg-type]
    assert refused.value.reason == reason


def test_a_module_cannot_set_what_the_model_service_grants() -> None:
    with pytest.raises(Exception) as refused:
        RunSpec.define(
            id="acme.byo-grant/v1",
            agents={"ada": byo(("python", "a.py"), environment={"MODEL_NAME": "gpt-4o"})},
            execute=_never,
        )
    assert getattr(refused.value, "reason", None) == "service-variable"


def test_a_program_gets_no_model_unless_granted_and_then_the_run_s_gateway() -> None:
    plain = byo(("python", "a.py"))
    granted = byo(("python", "a.py"), provider="local", token_budget=500)
    assert plain.services == () and plain.token_budget is None
    assert len(granted.services) == 1 and granted.model_token_budget == 500
    assert granted.model_provider is None  # the run's local model


async def _never(ctx: RunContext) -> None:
    raise AssertionError("never runs")


@pytest.mark.anyio
async def test_a_declared_package_the_agents_python_lacks_refuses_the_run_before_it_starts(
    artifact_root: Path,
) -> None:
    spec = RunSpec.define(
        id="acme.byo-packages/v1",
        agents={"ada": byo(("python", "a.py"), packages=("no-such-distribution>=1",))},
        execute=_never,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "package-missing"
    assert "ada" in outcome.cause.detail and "no-such-distribution>=1" in outcome.cause.detail
