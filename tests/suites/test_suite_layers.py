"""Suites and viewers sit below operator tooling and the CLI only; only the CLI imports them;
importing them stays cheap until a command runs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITES_VIEWERS = ("controller.suites", "controller.viewer")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_nothing_below_the_cli_imports_suites_or_viewers() -> None:
    below = [
        path
        for top in ("society_sandbox", "ledger", "controller", "agent_images")
        for path in (ROOT / top).rglob("*.py")
        # the facade, controller/__init__.py, sits above the CLI
        if not str(path.relative_to(ROOT)).startswith(
            ("controller/suites", "controller/viewer", "controller/cli", "controller/__init__")
        )
    ]
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            n for n in _imports(path) if n.startswith(SUITES_VIEWERS)
        )
        for path in below
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_suites_and_viewers_import_nothing_from_the_cli() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("suites", "viewer")
        for path in (ROOT / "controller" / package).rglob("*.py")
        if any(name.startswith("controller.cli") for name in _imports(path))
    ]
    assert offenders == []


def test_importing_the_packages_loads_no_server_or_kernel() -> None:
    probe = "import sys, controller.suites, controller.viewer; print('\\n'.join(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    heavy = ("starlette", "uvicorn", "temporalio", "controller.run", "playwright")
    assert sorted(m for m in loaded if m.startswith(heavy)) == []
