"""``scripts/setup.sh`` prints exactly one JSON line on stdout; every install line goes to stderr.

The real scripts run in a scratch copy of the repository whose ``.venv`` holds stand-ins for pip
(``FAKE_python``: prints install chatter on stdout, as pip and the llama.cpp build do) and for
``society`` (``FAKE_society``: prints the one result line), so nothing is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/bin/sh
echo "Collecting llama-cpp-python (stand-in for pip's chatter on stdout)"
echo "  Building wheel for llama-cpp-python (pyproject.toml): started"
"""
FAKE_SOCIETY = """#!/bin/sh
echo '{"outcome": "ProgramFinished", "exit": "success"}'
"""


def _scratch_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "bootstrap.sh"):
        shutil.copy2(ROOT / "scripts" / name, repo / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("society", FAKE_SOCIETY)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return repo


def test_bootstrap_writes_nothing_to_stdout(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path)
    done = subprocess.run(
        [str(repo / "scripts" / "bootstrap.sh")], capture_output=True, text=True, check=True
    )
    assert done.stdout == ""
    assert "Collecting llama-cpp-python" in done.stderr


def test_setup_prints_exactly_one_json_line(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path)
    done = subprocess.run(
        [str(repo / "scripts" / "setup.sh")], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert json.loads(lines[0])["exit"] == "success"
    assert "Building wheel" in done.stderr
