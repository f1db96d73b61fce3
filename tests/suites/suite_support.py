"""Helpers for the suite tests: the `society` command, the journal, copies to tamper with."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "negotiation_suite.py"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
JOBS = "6"


def society(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SOCIETY, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


def journal_entries(folder: Path) -> list[dict[str, Any]]:
    path = folder / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class SuiteFixture:
    folder: Path
    interrupted_rc: int
    interrupted_line: dict[str, Any]
    before_resume: list[dict[str, Any]]
    resumed: dict[str, Any]


def copy_suite(fixture: SuiteFixture, destination: Path) -> Path:
    """A copy of the suite's folder to tamper with (without the Temporal dev server's files)."""
    target = destination / fixture.folder.name
    shutil.copytree(fixture.folder, target, ignore=shutil.ignore_patterns(".temporal", "logs"))
    return target
