"""The nanoclaw runtime's options are checked when the RunSpec is defined, not in the sandbox."""

from __future__ import annotations

import json

import pytest

from controller import RunSpec, llm, nanoclaw, openclaw
from controller.agents.nanoclaw import NANOCLAW_MODEL_SERVICE, NanoClawRuntime
from controller.agents.openclaw import OPENCLAW_MODEL_SERVICE
from controller.agents.runtime import RuntimeDescriptorError
from controller.agents.shipped import shipped_runtimes
from controller.platforms.parts import needed_parts
from society_sandbox.runtimes.nanoclaw import AGENT_CONFIG_FILE, AgentOptions


def test_a_nanoclaw_agent_carries_its_trimmed_options_to_the_sandbox_as_a_file() -> None:
    agent = nanoclaw("You are Sam.", max_turns=3, output_tokens=96, token_budget=9_000)
    options = AgentOptions.model_validate_json(agent.files[AGENT_CONFIG_FILE])
    assert options.identity == "You are Sam." and options.allowed_tools == ("send_message",)
    assert (options.max_turns, options.output_tokens) == (3, 96)
    assert agent.model_token_budget == 9_000 and agent.model_provider is None
    assert json.loads(agent.files[AGENT_CONFIG_FILE])["maxTurns"] == 3


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"identity": "  "}, "no-identity"),
        ({"allowed_tools": ("Bash",)}, "unknown-tool"),
        ({"allowed_tools": ("send_message", "WebFetch")}, "unknown-tool"),
        ({"max_turns": 0}, "bad-option"),
        ({"output_tokens": 100_000}, "bad-option"),
        ({"sdk_max_turns": 0}, "bad-option"),
        ({"token_budget": 0}, "bad-option"),
    ],
)
def test_a_bad_nanoclaw_option_is_refused_at_definition_with_a_typed_reason(
    kwargs: dict[str, object], reason: str
) -> None:
    arguments: dict[str, object] = {"identity": "You are Sam."} | kwargs
    with pytest.raises(RuntimeDescriptorError) as refused:
        nanoclaw(**arguments)  # type: ignore[arg-type]
    assert refused.value.reason == reason


def test_nanoclaw_is_a_shipped_runtime_that_shares_the_openclaw_model_service() -> None:
    assert shipped_runtimes()["nanoclaw"] is NanoClawRuntime
    assert NANOCLAW_MODEL_SERVICE == OPENCLAW_MODEL_SERVICE  # one gateway for a mixed society


def test_a_roster_without_nanoclaw_agents_does_not_need_its_install() -> None:
    async def execute(ctx: object) -> None:
        return None

    with_nano = RunSpec.define(
        id="acme.nanoclaw-parts/v1", agents={"sam": nanoclaw("You are Sam.")}, execute=execute
    )
    assert "nanoclaw" in [part.key for part in needed_parts(with_nano.agents)]
    others = {"bea": openclaw("You are Bea."), "lee": llm("You are Lee.")}
    assert "nanoclaw" not in [part.key for part in needed_parts(others)]
