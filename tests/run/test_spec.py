"""RunSpec definitions and module loading fail early, with a reason and a way forward."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from controller import Event, EventCatalog, RunSpec
from controller.agents import scripted
from controller.errors import SetupError
from controller.events.run import RunStarted
from controller.lifecycle.runner import loaded_module as _loaded_module
from controller.platforms.local import LocalPlatform
from controller.run import RunRequest, RunSpecError, execute_run, load_run_spec, new_run_id
from controller.run.module_source import ModuleSource, ModuleSourceError
from ledger import CatalogError


class Agreed(Event):
    tag: ClassVar[str] = "acme.agreed/v1"
    offer: str


async def program(ctx: Any) -> None:
    return None


def define(**changes: Any) -> RunSpec:
    fields: dict[str, Any] = {
        "id": "acme.test/v1",
        "events": [EventCatalog.make(Agreed)],
        "agents": {"alice": scripted()},
        "execute": program,
    }
    fields.update(changes)
    return RunSpec.define(**fields)


def test_a_definition_merges_its_catalogs_with_the_core_catalog() -> None:
    spec = define()
    assert "acme.agreed/v1" in spec.catalog and RunStarted in spec.catalog
    assert spec.events.tags == ["acme.agreed/v1"]
    assert list(spec.agents) == ["alice"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"id": "negotiation"}, "bad-id"),
        ({"id": "acme.negotiation/v0"}, "bad-id"),
        ({"agents": {"Alice": scripted()}}, "bad-roster-name"),
        ({"agents": {"a" * 64: scripted()}}, "bad-roster-name"),
        ({"agents": {"alice": object()}}, "bad-runtime"),
        ({"execute": lambda ctx: None}, "execute-not-async"),
    ],
)
def test_a_bad_definition_fails_when_defined(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(RunSpecError) as failure:
        define(**changes)
    assert failure.value.reason == reason


def test_duplicate_malformed_or_core_tags_fail_when_defined() -> None:
    class Twin(Event):
        tag: ClassVar[str] = "acme.agreed/v1"

    class Unversioned(Event):
        tag: ClassVar[str] = "acme.agreed"

    with pytest.raises(CatalogError) as duplicate:
        define(events=[EventCatalog.make(Agreed), Twin])
    assert duplicate.value.reason == "duplicate-tag"
    with pytest.raises(CatalogError) as malformed:
        define(events=[Unversioned])
    assert malformed.value.reason == "malformed-tag"
    with pytest.raises(CatalogError) as core:
        define(events=[RunStarted])
    assert core.value.reason == "core-event-in-customer-catalog"


HEADER = """\
from controller import RunSpec
from controller.agents import scripted

async def execute(ctx):
    return None
"""


@pytest.mark.parametrize(
    ("body", "reason", "says"),
    [
        ("x = 1\n", "no-run-spec", "defines no module-level 'run_spec'"),
        ("run_spec = 3\n", "no-run-spec", "not a RunSpec"),
        ("run_spec = RunSpec.define(\n", "module-import-failed", "SyntaxError"),
        ("import no_such_module_here\n", "module-import-failed", "ModuleNotFoundError"),
        (
            "run_spec = RunSpec.define(id='acme.a/v1', agents={'Bob': scripted()}, "
            "execute=execute)\n",
            "bad-roster-name",
            "roster name 'Bob'",
        ),
    ],
)
def test_a_bad_module_fails_with_a_clear_error(
    tmp_path: Path, body: str, reason: str, says: str
) -> None:
    module = tmp_path / "experiment.py"
    module.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(RunSpecError) as failure:
        load_run_spec(module)
    assert failure.value.reason == reason
    assert says in str(failure.value)


def test_a_module_imports_the_modules_beside_it_as_python_module_py_would(
    tmp_path: Path,
) -> None:
    (tmp_path / "sibling_roster.py").write_text(
        "from controller.agents import scripted\nROSTER = {'ann': scripted()}\n"
    )
    (tmp_path / "sibling_pkg").mkdir()
    (tmp_path / "sibling_pkg" / "__init__.py").write_text("SPEC_ID = 'acme.siblings/v1'\n")
    module = tmp_path / "experiment.py"
    module.write_text(
        HEADER + "from sibling_roster import ROSTER\nfrom sibling_pkg import SPEC_ID\n"
        "run_spec = RunSpec.define(id=SPEC_ID, agents=ROSTER, execute=execute)\n"
    )
    assert subprocess.run([sys.executable, str(module)], check=False).returncode == 0
    spec = load_run_spec(module)
    assert spec.id == "acme.siblings/v1" and list(spec.agents) == ["ann"]
    assert str(tmp_path) not in sys.path  # importable while it loads, not after


@pytest.mark.parametrize("helper", ["_base", "base"])
def test_a_helper_run_spec_under_another_name_is_allowed(tmp_path: Path, helper: str) -> None:
    module = tmp_path / "experiment.py"
    module.write_text(
        HEADER + f"{helper} = RunSpec.define(id='acme.base/v1', agents={{'ann': scripted()}}, "
        "execute=execute)\n"
        f"run_spec = RunSpec.define(id='acme.a/v1', agents={{**{helper}.agents, "
        "'ben': scripted()}, execute=execute)\n"
    )
    spec = load_run_spec(module)
    assert spec.id == "acme.a/v1" and list(spec.agents) == ["ann", "ben"]


def test_a_module_may_build_its_run_spec_from_other_run_specs_beside_it(tmp_path: Path) -> None:
    (tmp_path / "baseline_spec.py").write_text(
        HEADER + "run_spec = RunSpec.define(id='acme.baseline/v1', agents={'ann': scripted()}, "
        "execute=execute)\n"
    )
    module = tmp_path / "variant.py"
    module.write_text(
        HEADER
        + textwrap.dedent(
            """
            from baseline_spec import run_spec as baseline
            _base = RunSpec.define(id='acme.base/v1', agents={'ben': scripted()}, execute=execute)
            larger = RunSpec.define(
                id='acme.larger/v1', agents={**baseline.agents, **_base.agents}, execute=execute
            )
            run_spec = RunSpec.define(
                id='acme.variant/v1', agents={**larger.agents, 'cat': scripted()}, execute=execute
            )
            """
        )
    )
    spec = load_run_spec(module)
    assert spec.id == "acme.variant/v1" and list(spec.agents) == ["ann", "ben", "cat"]


def test_an_imported_run_spec_that_would_silently_replace_the_modules_own_is_refused(
    tmp_path: Path,
) -> None:
    """What the old "one RunSpec per module" rule guarded, kept: the experiment a module defines
    must not be shadowed by a ``run_spec`` it imports from beside it."""
    (tmp_path / "other_spec.py").write_text(
        HEADER + "run_spec = RunSpec.define(id='acme.other/v1', agents={}, execute=execute)\n"
    )
    module = tmp_path / "mine.py"
    module.write_text(
        HEADER + "from other_spec import run_spec\n"
        "mine = RunSpec.define(id='acme.mine/v1', agents={}, execute=execute)\n"
    )
    with pytest.raises(RunSpecError) as failure:
        load_run_spec(module)
    assert failure.value.reason == "run-spec-imported"
    assert "'acme.other/v1', defined in" in str(failure.value) and "other_spec.py" in str(
        failure.value
    )
    assert "(mine), which would not run" in str(failure.value)
    assert "'run_spec = mine'" in str(failure.value)

    reexport = tmp_path / "reexport.py"  # a module that only re-exports one is fine
    reexport.write_text("from other_spec import run_spec\n")
    assert load_run_spec(reexport).id == "acme.other/v1"


def test_a_module_that_ships_as_content_and_imports_a_sibling_is_refused_before_it_travels(
    tmp_path: Path,
) -> None:
    (tmp_path / "helpers_beside.py").write_text("ROSTER = {}\n")
    module = tmp_path / "experiment.py"
    module.write_text(
        HEADER + "import json\nfrom controller.agents import peer\n"
        "def later():\n    import helpers_beside\n"
        "run_spec = RunSpec.define(id='acme.a/v1', agents={}, execute=execute)\n"
    )
    assert load_run_spec(module).id == "acme.a/v1"  # the local profile imports it
    with pytest.raises(ModuleSourceError) as refused:
        ModuleSource.read(module)
    assert refused.value.reason == "module-imports-sibling"
    assert "imports helpers_beside from its own folder" in str(refused.value)
    assert "carries only the text of experiment.py" in str(refused.value)

    alone = tmp_path / "alone.py"  # what the environment provides travels fine
    alone.write_text(HEADER + "import json\nfrom controller import agents\n")
    assert ModuleSource.read(alone).name == "alone.py"


def _load_module(module: Path) -> RunSpec:
    """``society run``'s loading: the module's own sandboxed process defines its spec."""

    async def load() -> RunSpec:
        async with _loaded_module(module) as (spec, _):
            return spec

    return anyio.run(load)


def test_a_module_that_fails_to_import_names_a_check_that_fails_too(tmp_path: Path) -> None:
    """The next step's command is society's own interpreter on the module, and it fails the same
    way; a module that imports but defines no ``run_spec`` is not sent to a check that passes."""
    module = tmp_path / "experiment.py"
    module.write_text(HEADER + "import no_such_module_here\n")
    with pytest.raises(SetupError) as failure:
        _load_module(module)
    message = str(failure.value)
    assert failure.value.reason == "module-import-failed"
    assert "(experiment.py:6)" in message and f"not installed for {sys.executable}" in message
    assert f"`{sys.executable} {module}` reproduces the failure" in message
    check = subprocess.run([sys.executable, str(module)], capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'no_such_module_here'" in check.stderr

    imports = tmp_path / "no_spec.py"
    imports.write_text(HEADER)
    with pytest.raises(SetupError) as missing:
        _load_module(imports)
    assert missing.value.reason == "no-run-spec"
    assert "reproduces" not in str(missing.value) and sys.executable not in str(missing.value)


def test_a_missing_module_fails_with_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunSpecError) as failure:
        load_run_spec(tmp_path / "absent.py")
    assert failure.value.reason == "module-not-found"


@pytest.mark.anyio
async def test_execute_run_refuses_a_bad_module_before_anything_starts(tmp_path: Path) -> None:
    module = tmp_path / "broken.py"
    module.write_text("run_spec = (\n")
    root = tmp_path / "artifacts"
    run_id = new_run_id()
    with pytest.raises(RunSpecError):
        await execute_run(
            RunRequest(module_path=str(module), run_id=run_id, artifact_root=str(root)),
            LocalPlatform(),
        )
    assert not (root / run_id).exists()


def test_a_run_request_checks_the_run_id() -> None:
    with pytest.raises(ValueError):
        RunRequest(module_path="m.py", run_id="sr-XYZ", artifact_root="/tmp")
    assert new_run_id().startswith("sr-") and len(new_run_id()) == 35


def test_the_examples_load() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    assert load_run_spec(examples / "negotiation.py").id == "acme.negotiation/v1"
    assert list(load_run_spec(examples / "partition.py").agents) == ["ann", "ben", "cat"]
