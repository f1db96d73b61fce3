"""Real runs for the ledger tests: `society run` of an example, as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "hello.py"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def society_run(artifacts: Path, key: Path, module: Path = HELLO) -> dict[str, Any]:
    """Run ``module`` under ``artifacts`` signed with the operator key ``key``; its result line."""
    env = {**os.environ, "SOCIETY_SIGNING_KEY": str(key)}
    done = subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(artifacts)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return line
