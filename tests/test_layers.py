"""The layer rule: imports point downward only, and importing the controller stays cheap.

``LAYERS`` mirrors the numbered list "Layers" in ARCHITECTURE.md exactly, bottom first; every
module of ``ledger``, ``controller`` and ``agent_images`` belongs to one, and every import (also
under ``TYPE_CHECKING`` and inside functions) points to its own layer or one below. There is no
exception list. Two positions frame the list: the package plumbing, which imports no project code
(``controller._lazy``, the lazy-export helper, and ``controller.errors``, the error tree every layer
raises from), sits below layer 1, and the package facade ``controller`` (whose public names load
lazily) sits above layer 11, so nothing in a layer may import the facade.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "controller", "agent_images")

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("package plumbing", ("controller._lazy", "controller.errors")),
    ("1. ledger", ("ledger",)),
    ("2. controller.events", ("controller.events",)),
    ("3. controller.network", ("controller.network",)),
    ("4. agent_images", ("agent_images",)),
    ("5. Run-service contracts", ("controller.services",)),
    ("6. controller.modelgateway", ("controller.modelgateway",)),
    ("7. controller.agents", ("controller.agents",)),
    ("8. controller.run", ("controller.run",)),
    ("9a. controller.platforms", ("controller.platforms",)),
    ("9b. controller.program", ("controller.program",)),
    ("9c. controller.stores", ("controller.stores",)),
    ("9d. controller.incluster", ("controller.incluster",)),
    ("9e. controller.profiles", ("controller.profiles",)),
    ("9f. controller.lifecycle", ("controller.lifecycle",)),
    ("10. Suites and viewers", ("controller.suites", "controller.viewer")),
    ("11a. controller.ops", ("controller.ops",)),
    ("11b. controller.cli", ("controller.cli",)),
    ("the package facade", ("controller",)),
)
SEPARATE: tuple[tuple[str, str], ...] = (
    ("controller.platforms.local", "controller.platforms.kubernetes"),
    ("controller.platforms.kubernetes", "controller.platforms.local"),
)
"""Rooms of one layer that never import each other."""
NARROW: dict[str, tuple[str, ...]] = {
    "controller.lifecycle": (
        "controller.run",
        "controller.program",
        "controller.profiles",
        "controller.stores",
    ),
}
"""Rooms that may import, of layers 8 and up, only these (and themselves)."""
FACADE = "controller"
"""Only the module itself: ``controller.anything`` must sit in a numbered layer."""


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer (the longest matching prefix wins), or ``None``."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != FACADE and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(module: str, source: str, is_package: bool) -> Iterator[str]:
    """Every module ``source`` imports, relative imports resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([node.module] if node.module else [])])
            yield base
            # ``from controller import run`` imports the submodule ``controller.run``.
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def upward_imports(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """The violations in one module: imports of a higher layer, of a separate room, beyond a
    narrow room's allowance, or of a module outside the order."""
    own = layer_of(module)
    if own is None:
        return [f"{module} is in no layer of ARCHITECTURE.md"]
    kernel = layer_of("controller.run")
    narrow = next((room for room in NARROW if _within(module, room)), None)
    found = []
    for target in _imports(module, source, is_package):
        if target.split(".")[0] not in PACKAGES:
            continue
        theirs = layer_of(target)
        if theirs is None or theirs > own:
            where = "no layer" if theirs is None else LAYERS[theirs][0]
            found.append(f"{module} ({LAYERS[own][0]}) imports {target} ({where})")
            continue
        for mine, other in SEPARATE:
            if _within(module, mine) and _within(target, other):
                found.append(f"{module} imports {target}: {mine} and {other} are separate")
        if (
            narrow is not None
            and theirs >= kernel
            and not _within(target, narrow)
            and not any(_within(target, allowed) for allowed in NARROW[narrow])
        ):
            found.append(f"{module} imports {target}: {narrow} imports only {NARROW[narrow]}")
    return sorted(set(found))


def test_every_import_points_to_its_own_layer_or_below() -> None:
    violations = [
        violation
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for violation in upward_imports(
            _module_name(path),
            path.read_text(encoding="utf-8"),
            is_package=path.name == "__init__.py",
        )
    ]
    assert violations == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("controller.run.request", "from controller.profiles import platform_for"),
        ("controller.run.request", "def f():\n    import controller.platforms.local\n"),
        ("controller.platforms.local.platform", "from controller.platforms.kubernetes import Kube"),
        ("controller.platforms.kubernetes.session", "import controller.platforms.local.sandbox"),
        ("controller.lifecycle.activities", "from controller.platforms.local import reap_run"),
        ("controller.lifecycle.activities", "from controller.incluster import controller_job"),
        ("controller.ops.cluster.install", "from controller.cli import main"),
        ("controller.modelgateway.service", "from controller.agents import llm"),
        ("controller.modelgateway.service", "from controller import agents"),
        ("controller.agents.llm", "from ..run import kernel"),
        (
            "controller.services",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from controller.agents.runtime import RuntimeDescriptor\n",
        ),
        ("ledger.records", "import controller.events"),
        ("controller.network.router", "from controller import Run"),
        ("controller.newthing", "import ledger"),
    ],
)
def test_an_upward_import_fails_the_check(module: str, source: str) -> None:
    assert upward_imports(module, source) != []


def test_a_downward_import_passes_the_check() -> None:
    source = "from controller.modelgateway.config import ProviderConfig\nfrom . import runtime\n"
    assert upward_imports("controller.agents.llm", source) == []


def test_the_layers_are_the_eleven_of_architecture_md_in_order() -> None:
    numbered = [name.split(".")[0] for name, _ in LAYERS if name[0].isdigit()]
    majors = [int(number.rstrip("abcdefgh")) for number in numbered]
    assert sorted(set(majors)) == list(range(1, 12))
    assert majors == sorted(majors)
    assert len(numbered) == len(set(numbered))


def _modules_after_import(statement: str) -> set[str]:
    probe = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(out.stdout.split())


KERNEL = (
    "controller.run",
    "controller.platforms",
    "controller.incluster",
    "controller.profiles",
    "controller.lifecycle",
)


def test_importing_controller_loads_no_kernel_kubernetes_or_temporal() -> None:
    loaded = _modules_after_import("import controller")
    assert sorted(m for m in loaded if m.split(".")[0] in ("kubernetes", "temporalio")) == []
    assert sorted(m for m in loaded if m.startswith(KERNEL)) == []


def test_controller_exports_its_public_names_lazily() -> None:
    loaded = _modules_after_import("import controller\nassert controller.EventCatalog")
    assert "controller.run" not in loaded
    import controller

    assert set(controller.__all__) == set(controller._EXPORTS)
    assert set(controller.__all__) >= {"RunSpec", "Run", "Event", "EventCatalog", "core_events"}


def test_every_public_name_of_controller_resolves_to_what_its_module_defines() -> None:
    import importlib

    import controller

    for name, module in controller._EXPORTS.items():
        assert getattr(controller, name) is getattr(importlib.import_module(module), name), name


@pytest.mark.parametrize("module", ["controller.network.client"])
def test_the_agent_side_client_does_not_load_the_kernel(module: str) -> None:
    loaded = _modules_after_import(f"import {module}")
    forbidden = [
        m
        for m in loaded
        if m.split(".")[0] in ("kubernetes", "temporalio")
        or m.startswith((*KERNEL, "controller.network.router"))
    ]
    assert forbidden == []
