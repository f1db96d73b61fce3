"""Fixtures for the llm runtime: real local runs, a fake provider, the real local model."""

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

LLAMA_CPP_INSTALLED = importlib.util.find_spec("xllamacpp") is not None


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture
def artifact_root(tmp_path: Path) -> Path:
    root = tmp_path / "artifacts"
    root.mkdir()
    return root


@pytest.fixture
def fake_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        # the operator lets the run's gateway call it (as SOCIETY_PROVIDER_URLS does)
        monkeypatch.setenv(PROVIDER_URLS.name, server.base_url)
        yield server


@pytest.fixture
def require_llama_cpp() -> None:
    """Skip without the local model, except under CI (env CI set), where that is a failure."""
    if LLAMA_CPP_INSTALLED:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the real-model tests)")
    pytest.skip(message)
