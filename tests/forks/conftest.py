"""Fixtures of the replay, fork and parameter tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from forks_support import Society


@pytest.fixture
def society(tmp_path: Path) -> Society:
    return Society(tmp_path / "artifacts")


@pytest.fixture
def require_llama_cpp() -> None:
    """Skip without the local model, except under CI (env CI set), where that is a failure."""
    if importlib.util.find_spec("llama_cpp") is not None:
        return
    message = "llama_cpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the real-model tests)")
    pytest.skip(message)
