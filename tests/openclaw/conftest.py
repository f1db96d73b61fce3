"""Fixtures for the OpenClaw runtime: the pinned install is required (a failure under CI)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from society_sandbox.runtimes.openclaw import openclaw_executable


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture
def require_openclaw() -> None:
    """Skip without the pinned OpenClaw install, except under CI (env CI set): a failure there."""
    if openclaw_executable().is_file():
        return
    message = f"no OpenClaw at {openclaw_executable()}; run scripts/install-openclaw.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the OpenClaw tests)")
    pytest.skip(message)


@pytest.fixture
def require_llama_cpp() -> None:
    """The local model behind the gateway; a failure under CI, as in tests/llm."""
    if importlib.util.find_spec("xllamacpp") is not None:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the real-model tests)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def require_openclaw_module() -> None:
    """``require_openclaw`` and the local model, for module-scoped runs."""
    missing = [
        what
        for what, present in (
            ("OpenClaw (scripts/install-openclaw.sh)", openclaw_executable().is_file()),
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
        pytest.fail(f"missing {', '.join(missing)} (CI must run the OpenClaw tests)")
    pytest.skip(f"missing {', '.join(missing)}")
