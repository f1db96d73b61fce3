"""Settings are read once per entry point, each ``SOCIETY_*`` name is spelled once, in
``controller/settings.py`` (the boot contract's in ``society_sandbox/boot.py``), only those two
read the environment, and ``docs/cli.md`` lists every variable with the meaning the module gives."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from controller import settings
from controller.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "controller" / "settings.py"
BOOT = ROOT / "society_sandbox" / "boot.py"
SANDBOX_SIDE_BOOT = (ROOT / "controller" / "platforms" / "local" / "namespaces.py",)
"""Code that runs as an agent's first instructions inside its sandbox (the template's fork sets
the agent's own environment before the runtime starts), not in the controller."""
CODE = sorted(
    path for package in ("controller", "ledger") for path in (ROOT / package).rglob("*.py")
)


def _names(source: str) -> list[str]:
    """Every string constant in ``source`` that is a whole ``SOCIETY_*`` variable name."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"SOCIETY_[A-Z0-9_]+", node.value)
    ]


def _environment_uses(source: str) -> list[int]:
    """The lines of ``source`` that touch ``os.environ`` or call ``os.getenv``/``getenv``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "getenv":
            found.append(node.lineno)
    return found


def test_every_society_variable_is_spelled_only_in_the_settings_module_or_the_boot_contract() -> (
    None
):
    spelled = {
        str(path.relative_to(ROOT)): _names(path.read_text(encoding="utf-8"))
        for path in CODE
        if path != SETTINGS
    }
    assert {path: names for path, names in spelled.items() if names} == {}
    in_settings = _names(SETTINGS.read_text(encoding="utf-8"))
    in_boot = set(_names(BOOT.read_text(encoding="utf-8")))
    assert len(in_settings) == len(set(in_settings))
    assert not set(in_settings) & in_boot


def test_only_the_settings_module_touches_the_environment() -> None:
    touched = {
        str(path.relative_to(ROOT)): _environment_uses(path.read_text(encoding="utf-8"))
        for path in CODE
        if path != SETTINGS and path not in SANDBOX_SIDE_BOOT
    }
    assert {path: lines for path, lines in touched.items() if lines} == {}


@pytest.mark.parametrize(
    "source",
    [
        "import os\nroot = os.environ.get('SOCIETY_ARTIFACTS')\n",
        "import os\nos.environ['SOCIETY_UNSANDBOXED'] = '1'\n",
        "from os import getenv\nqueue = getenv('Q')\n",
        "import os\nenv = {**os.environ}\n",
    ],
)
def test_a_read_or_write_of_the_environment_is_found(source: str) -> None:
    assert _environment_uses(source) != []


def test_every_variable_has_a_meaning_and_one_name() -> None:
    names = [variable.name for variable in settings.VARIABLES]
    assert len(names) == len(set(names))
    assert all(v.name.startswith("SOCIETY_") and v.meaning for v in settings.VARIABLES)


def _documented() -> dict[str, str]:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("## Environment") :]
    return dict(re.findall(r"(?m)^\| `(SOCIETY_[A-Z0-9_]+)` \| (.+) \|$", section))


def test_docs_cli_lists_every_variable_with_its_meaning() -> None:
    assert _documented() == {v.name: v.meaning for v in settings.VARIABLES}


def test_settings_are_a_snapshot_taken_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.ARTIFACTS.name, "/tmp/first")
    read = Settings.read()
    monkeypatch.setenv(settings.ARTIFACTS.name, "/tmp/second")
    assert read.artifact_root() == Path("/tmp/first")
    assert Settings.read().artifact_root() == Path("/tmp/second")


def test_the_artifact_root_is_the_option_then_the_variable_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    given = Settings({settings.ARTIFACTS.name: str(tmp_path / "env")})
    assert given.artifact_root(Path("opt")) == tmp_path / "opt"
    assert given.artifact_root() == tmp_path / "env"
    assert Settings({}).artifact_root() == tmp_path / "artifacts"


def test_an_overlay_wins_and_a_fill_never_does() -> None:
    base = Settings({settings.KUBE_CONTEXT.name: "mine", settings.UNSANDBOXED.name: ""})
    overlaid = base.overlay({settings.UNSANDBOXED.name: "1"})
    assert overlaid.flag(settings.UNSANDBOXED) and not base.flag(settings.UNSANDBOXED)
    filled, what = base.fill({settings.KUBE_CONTEXT.name: "file", settings.LEDGER_SIZE.name: "2Gi"})
    assert filled.get(settings.KUBE_CONTEXT) == "mine"
    assert what == {settings.LEDGER_SIZE.name: "2Gi"}


def test_installed_settings_are_current_for_the_block_only() -> None:
    mine = Settings({settings.TASK_QUEUE.name: "q-1"})
    with settings.installed(mine):
        assert settings.current() is mine
    assert settings.current() is not mine


def test_the_module_process_gets_no_controller_setting() -> None:
    env = Settings(
        {"SOCIETY_ARTIFACTS": "/a", "TEMPORAL_ADDRESS": "t:1", "KUBECONFIG": "k", "HOME": "/h"}
    )
    assert env.without_controller_settings() == {"HOME": "/h"}
