"""Fixtures for the NanoClaw runtime: the pinned install and the local model are required (a
failure under CI, a skip on a developer's partial machine)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "modelgateway"))

from fake_provider import FakeProviderServer

from controller.settings import PROVIDER_URLS
from society_sandbox.runtimes.nanoclaw import claude_code_executable, node_executable


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture(scope="module")
def require_nanoclaw() -> None:
    """NanoClaw's Node side (scripts/install-nanoclaw.sh) and the local model (install-llm.sh)."""
    missing = [
        what
        for what, present in (
            (
                "NanoClaw's Node side (scripts/install-nanoclaw.sh)",
                node_executable().is_file() and claude_code_executable().is_file(),
            ),
            (
                "xllamacpp (scripts/install-llm.sh)",
                importlib.util.find_spec("xllamacpp") is not None,
            ),
        )
        if not present
    ]
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"missing {', '.join(missing)} (CI must run the NanoClaw tests)")
    pytest.skip(f"missing {', '.join(missing)}")


@pytest.fixture
def fake_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProviderServer]:
    """A scripted OpenAI-compatible provider: what no local model does (tool calls) on demand."""
    with FakeProviderServer() as server:
        # the operator lets the run's gateway call it (as SOCIETY_PROVIDER_URLS does)
        monkeypatch.setenv(PROVIDER_URLS.name, server.base_url)
        yield server
