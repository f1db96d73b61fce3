"""The example suite, run once for real (interrupted part-way, then resumed) for these tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from suite_support import EXAMPLE, JOBS, ROOT, SOCIETY, SuiteFixture, journal_entries, society


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
