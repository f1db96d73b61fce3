"""The layer rule: imports point downward only, and importing the controller stays cheap."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_nothing_in_ledger_imports_controller() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imported_modules(path) if name.split(".")[0] == "controller"
        )
        for path in (ROOT / "ledger").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def _modules_after_import(statement: str) -> set[str]:
    probe = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(out.stdout.split())


HEAVY = ("kubernetes", "temporalio", "controller.run", "controller.platform")


def test_importing_controller_loads_no_kernel_kubernetes_or_temporal() -> None:
    loaded = _modules_after_import("import controller")
    assert sorted(m for m in loaded if m.split(".")[0] in ("kubernetes", "temporalio")) == []
    kernel = ("controller.run", "controller.platform")
    assert sorted(m for m in loaded if m.startswith(kernel)) == []


def test_controller_exports_its_public_names_lazily() -> None:
    loaded = _modules_after_import("import controller\nassert controller.EventCatalog")
    assert "controller.run" not in loaded
    import controller

    assert set(controller.__all__) == set(controller._EXPORTS)
    assert set(controller.__all__) >= {"RunSpec", "Run", "Event", "EventCatalog", "core_events"}


@pytest.mark.parametrize("module", ["controller.network.client"])
def test_the_agent_side_client_does_not_load_the_kernel(module: str) -> None:
    loaded = _modules_after_import(f"import {module}")
    forbidden = [
        m
        for m in loaded
        if m.split(".")[0] in ("kubernetes", "temporalio")
        or m.startswith(("controller.run", "controller.platform", "controller.network.router"))
    ]
    assert forbidden == []
