"""The example suite, run once for real (interrupted part-way, then resumed) for these tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="session")
def example_suite(tmp_path_factory: pytest.TempPathFactory) -> SuiteFixture:
    artifacts = tmp_path_factory.mktemp("suite-artifacts")
    folder = artifacts / "negotiation-v1"
    command = [
        *SOCIETY,
        "suite",
        "run",
        str(EXAMPLE),
        "--artifacts",
        str(artifacts),
        "--jobs",
        JOBS,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    deadline = time.monotonic() + 300
    while sum(entry.get("exit") == 0 for entry in journal_entries(folder)) < 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no run of the suite finished within 300 s"
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGINT)  # as `kill -INT`, or Ctrl-C on its terminal
    stdout, _ = process.communicate(timeout=180)
    before = journal_entries(folder)
    resumed = society("suite", "run", str(EXAMPLE), "--artifacts", str(artifacts), "--jobs", JOBS)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return SuiteFixture(
        folder=folder,
        interrupted_rc=process.returncode,
        interrupted_line=json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {},
        before_resume=before,
        resumed=json.loads(resumed.stdout.strip().splitlines()[-1]),
    )


def copy_suite(fixture: SuiteFixture, destination: Path) -> Path:
    """A copy of the suite's folder to tamper with (without the Temporal dev server's files)."""
    target = destination / fixture.folder.name
    shutil.copytree(fixture.folder, target, ignore=shutil.ignore_patterns(".temporal", "logs"))
    return target
