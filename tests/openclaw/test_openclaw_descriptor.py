"""The ``openclaw(...)`` descriptor: OpenClaw's options map onto its real config, and bad
configuration fails when the RunSpec is defined, with a reason and the next step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller import RunSpec
from controller.agents.openclaw import OPENCLAW_MODEL_SERVICE, OpenClawRuntime, openclaw
from controller.agents.runtime import RuntimeDescriptorError
from society_sandbox.runtimes.openclaw import (
    AGENT_CONFIG_FILE,
    TRANSCRIPT_DB,
    AgentOptions,
    openclaw_config,
)


async def _idle(ctx: object) -> None:
    return None


def test_an_unknown_tool_name_fails_when_the_run_spec_is_defined() -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        RunSpec.define(
            id="acme.bad-tools/v1",
            agents={"a": openclaw("You are A.", tools_deny=["group:runtime", "shell_magic"])},
            execute=_idle,
        )
    assert refused.value.reason == "unknown-tool"
    assert "'shell_magic'" in str(refused.value) and "group:fs" in str(refused.value)


def test_a_missing_workspace_file_fails_when_the_run_spec_is_defined(tmp_path: Path) -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        openclaw("You are A.", workspace={"SOUL.md": tmp_path / "absent" / "SOUL.md"})
    assert refused.value.reason == "missing-workspace-file"
    assert "SOUL.md" in str(refused.value)
    with pytest.raises(RuntimeDescriptorError) as unknown:
        openclaw("You are A.", workspace={"secrets.txt": "x"})
    assert unknown.value.reason == "bad-workspace-file"
    with pytest.raises(RuntimeDescriptorError) as mode:
        openclaw("You are A.", exec_mode="yolo")  # type: ignore[arg-type]
    assert mode.value.reason == "bad-option"


def test_the_options_map_onto_openclaws_own_config(tmp_path: Path) -> None:
    soul = tmp_path / "SOUL.md"
    soul.write_text("Be brief.")
    agent = openclaw(
        "You are A.",
        workspace={"SOUL.md": soul, "AGENTS.md": "Answer in one line."},
        tools_deny=["group:runtime", "group:web"],
        tools_allow=["read"],
        exec_mode="allowlist",
        sandbox_mode="all",
        max_reply_tokens=32,
    )
    assert isinstance(agent, OpenClawRuntime) and agent.runtime == "openclaw"
    assert agent.services == (OPENCLAW_MODEL_SERVICE,) and agent.model_provider is None
    assert agent.files["workspace/IDENTITY.md"] == b"You are A."
    assert agent.files["workspace/SOUL.md"] == b"Be brief."
    assert TRANSCRIPT_DB in agent.harvest.files
    options = AgentOptions.model_validate_json(agent.files[AGENT_CONFIG_FILE])
    config = openclaw_config(
        options, workdir=Path("/home/agent"), port=4321, token="t", model_base_url="u", model="m"
    )
    assert config["tools"] == {
        "deny": ["group:runtime", "group:web"],
        "allow": ["read"],
        "elevated": {"enabled": False},
        "exec": {"mode": "allowlist"},
    }
    defaults = config["agents"]["defaults"]
    assert defaults["sandbox"] == {"mode": "all"} and defaults["skills"] == []
    assert defaults["contextInjection"] == "never" and defaults["skipBootstrap"] is True
    assert defaults["workspace"] == "/home/agent/workspace"
    assert defaults["model"]["primary"] == "society/m"
    assert config["gateway"] == {
        "mode": "local",
        "bind": "loopback",
        "port": 4321,
        "auth": {"mode": "token", "token": "t"},
    }
    assert config["models"]["providers"]["society"]["models"][0]["maxTokens"] == 32
    assert json.loads(json.dumps(config)) == config
