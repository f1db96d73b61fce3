"""The agent-side client loads neither the router nor the kernel, Temporal or Kubernetes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("controller.network.router", "controller.run", "temporalio", "kubernetes")


@pytest.mark.parametrize(
    "statement",
    [
        "import society_sandbox.network.client",
        "from controller.network import connect_agent, Delivery, NetworkError",
        "import controller.network",
    ],
)
def test_importing_the_client_loads_no_router_kernel_temporal_or_kubernetes(
    statement: str,
) -> None:
    probe = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []
    assert "controller.network.fabric" not in loaded
