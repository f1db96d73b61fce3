"""Helpers for the viewer tests: the `society` command and how Chromium is launched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def society(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SOCIETY, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )
