"""Fixtures of the replay, fork and parameter tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from forks_support import EXAMPLES, PROGRAMS, Society


@pytest.fixture
def society(tmp_path: Path) -> Society:
    return Society(tmp_path / "artifacts")


def _require_llama_cpp() -> None:
    """Skip without the local model, except under CI (env CI set), where that is a failure."""
    if importlib.util.find_spec("xllamacpp") is not None:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the real-model tests)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def hello_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of examples/hello.py for the session: tests read it, or copy it to change it."""
    home = Society(tmp_path_factory.mktemp("hello") / "artifacts")
    return home.run_dir(home.run(EXAMPLES / "hello.py"))


@pytest.fixture(scope="session")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the temperature-0 llm program on the local model, read by its tests."""
    _require_llama_cpp()
    home = Society(tmp_path_factory.mktemp("llm") / "artifacts")
    return home.run_dir(home.run(PROGRAMS / "llm_zero.py"))
