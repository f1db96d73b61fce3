"""The real ``society`` command for the replay, fork and parameter tests: real Temporal (the dev
server each command starts under its artifact root), real kernel, real sandboxed agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROGRAMS = Path(__file__).resolve().parent / "programs"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    def line(self) -> dict[str, Any]:
        lines = self.stdout.splitlines()
        assert len(lines) == 1, f"expected one JSON line, got {lines!r}\n{self.stderr}"
        document = json.loads(lines[0])
        assert isinstance(document, dict)
        return document


@dataclass(frozen=True)
class Society:
    artifacts: Path

    def __call__(self, *args: str | Path, timeout_s: float = 300) -> Ran:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for name in ("SOCIETY_ARTIFACTS", "TEMPORAL_ADDRESS"):
            env.pop(name, None)
        done = subprocess.run(
            [*SOCIETY, *map(str, args)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=timeout_s,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    def run(self, module: str | Path, *args: str | Path) -> Ran:
        return self("run", module, "--artifacts", self.artifacts, *args)

    def run_dir(self, ran: Ran) -> Path:
        assert ran.code == 0, ran.stderr
        return self.artifacts / str(ran.line()["runId"])
