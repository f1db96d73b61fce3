"""``society run --help`` fits on one screen and walks through write, run, verify, grade."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _help() -> str:
    env = {**os.environ, "COLUMNS": "100"}
    out = subprocess.run(
        [sys.executable, "-c", "from controller.cli import main; main()", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
    )
    return out.stdout


def test_run_help_fits_on_one_screen() -> None:
    lines = _help().splitlines()
    assert len(lines) <= 24, "\n".join(lines)
    assert max(len(line) for line in lines) <= 100


def test_run_help_explains_write_run_verify_grade() -> None:
    text = _help()
    for step in ("RunSpec", "society run MODULE.py", "society ledger verify", "society grade"):
        assert step in text
