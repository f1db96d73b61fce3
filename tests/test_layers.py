"""The layer rule: imports point downward only, the sandbox's wall stands, and importing the
controller stays cheap.

``LAYERS`` names the layers of ``docs/CONTRACTS.md`` (its table is checked against this tuple),
bottom first; every module of ``society_sandbox``, ``ledger`` and ``controller`` belongs to one, and
every import (also under ``TYPE_CHECKING`` and inside functions) points to its own layer or one
below. There is no exception list. The wall package (``society_sandbox``: what both sides of a
sandbox share) is the bottom and imports nothing of the project; ``agent_images`` (the programs
inside sandboxes) stands beside the controller's layers and imports only the wall; nothing of
``controller`` or ``ledger`` imports ``agent_images``. The package facade ``controller`` (whose
public names load lazily) sits on top, so nothing in a layer may import the facade.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("society_sandbox", "ledger", "controller", "agent_images")
WALL = "society_sandbox"
PROGRAMS = "agent_images"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the wall", ("society_sandbox",)),
    ("the ledger", ("ledger",)),
    ("package plumbing", ("controller._lazy", "controller.errors", "controller.settings")),
    ("core events", ("controller.events",)),
    ("the router and network", ("controller.network",)),
    ("run-service contracts", ("controller.services",)),
    ("the model gateway", ("controller.modelgateway",)),
    ("runtime descriptors and bridges", ("controller.agents",)),
    ("the run kernel", ("controller.run",)),
    ("the platforms", ("controller.platforms",)),
    ("the module's process", ("controller.program",)),
    ("ledger stores", ("controller.stores",)),
    ("the in-cluster side", ("controller.incluster",)),
    ("profiles", ("controller.profiles",)),
    ("the lifecycle", ("controller.lifecycle",)),
    ("suites and viewers", ("controller.suites", "controller.viewer")),
    ("operator tooling", ("controller.ops",)),
    ("the CLI", ("controller.cli",)),
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
"""Rooms that may import, of the run kernel's layer and up, only these (and themselves)."""
FACADE = "controller"
"""Only the module itself: ``controller.anything`` must sit in a named layer."""


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
    if _within(module, PROGRAMS):
        return sorted(
            {
                f"{module} ({PROGRAMS}) imports {target}: the programs import only {WALL}"
                for target in _imports(module, source, is_package)
                if target.split(".")[0] in PACKAGES and target.split(".")[0] not in (WALL, PROGRAMS)
            }
        )
    own = layer_of(module)
    if own is None:
        return [f"{module} is in no layer of docs/CONTRACTS.md"]
    kernel = layer_of("controller.run")
    narrow = next((room for room in NARROW if _within(module, room)), None)
    found = []
    for target in _imports(module, source, is_package):
        if target.split(".")[0] not in PACKAGES:
            continue
        if _within(target, PROGRAMS):
            found.append(f"{module} imports {target}: only the sandbox's programs import those")
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


def _contracts_table() -> list[tuple[str, tuple[str, ...]]]:
    """The layer table of docs/CONTRACTS.md: ``| name | `package`, ... |`` rows, bottom first."""
    text = (ROOT / "docs" / "CONTRACTS.md").read_text(encoding="utf-8")
    table = text[text.index("| layer | packages |") :].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    return [(name.strip(), tuple(re.findall(r"`([^`]+)`", cells))) for name, cells in rows]


def test_docs_contracts_lists_the_layers_in_this_order() -> None:
    assert _contracts_table() == list(LAYERS)


def test_every_layer_has_a_name_and_no_package_sits_in_two() -> None:
    names = [name for name, _ in LAYERS]
    assert all(name and not name[0].isdigit() for name in names)
    assert len(names) == len(set(names))
    prefixes = [prefix for _, room in LAYERS for prefix in room]
    assert len(prefixes) == len(set(prefixes))


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("society_sandbox.network.errors", "from controller.errors import SocietyError"),
        ("society_sandbox.boot", "import ledger"),
        ("society_sandbox.runtimes.llm", "from agent_images.llm import agent"),
        ("agent_images.llm.agent", "from controller.network import connect_agent"),
        ("agent_images.scripted.agent", "from ledger.records import Record"),
        ("agent_images.peer.agent", "def f():\n    import controller.errors\n"),
        ("controller.platforms.local.launch", "import agent_images"),
        ("controller.agents.llm", "from agent_images.llm.agent import main"),
        ("ledger.verify", "from agent_images import warm"),
    ],
)
def test_the_wall_holds_in_the_import_check(module: str, source: str) -> None:
    assert upward_imports(module, source) != []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("agent_images.llm.agent", "from society_sandbox.boot import BootConfig"),
        ("agent_images.llm.agent", "from agent_images.router_session import live_session"),
        ("controller.agents.llm", "from society_sandbox.runtimes.llm import LLMConfig"),
        ("ledger.verify", "import society_sandbox.errors"),
    ],
)
def test_the_wall_may_be_imported_from_both_sides(module: str, source: str) -> None:
    assert upward_imports(module, source) == []


AGENT_IMAGES = ("python", "openclaw", "nanoclaw")
"""The images agents run in (the controller's, the worker's and Temporal's are not agents')."""


@pytest.mark.parametrize("image", AGENT_IMAGES)
def test_an_agent_image_copies_only_the_wall_and_the_programs(image: str) -> None:
    dockerfile = (ROOT / "agent_images" / image / "Dockerfile").read_text(encoding="utf-8")
    copied = {
        Path(line.split()[1]).parts[0]
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and not line.startswith("COPY --from")
    }
    assert copied - {"wheels"} == {WALL, PROGRAMS}


def test_a_local_agent_sandbox_mounts_only_the_wall_and_the_programs() -> None:
    from controller.platforms.local.sandbox import AGENT_PACKAGES, _code_paths

    assert AGENT_PACKAGES == (WALL, PROGRAMS)
    code, python_path = _code_paths()
    packages = [ROOT / package for package in PACKAGES]
    mounted = {package.name for package in packages if any(package.is_relative_to(c) for c in code)}
    assert mounted == set(AGENT_PACKAGES)
    assert python_path == (str(ROOT),)


@pytest.mark.parametrize(
    "path",
    sorted(
        [*(ROOT / "examples").rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    ),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_examples_and_docs_never_import_the_agent_programs(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert re.findall(r"(?m)^\s*(?:from|import) agent_images\b.*$", text) == []


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


@pytest.mark.parametrize("module", ["society_sandbox.network.client", "society_sandbox.boot"])
def test_the_agent_side_client_does_not_load_the_kernel(module: str) -> None:
    loaded = _modules_after_import(f"import {module}")
    forbidden = [
        m
        for m in loaded
        if m.split(".")[0] in ("kubernetes", "temporalio")
        or m.startswith((*KERNEL, "controller.network.router"))
    ]
    assert forbidden == []
