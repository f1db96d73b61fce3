"""``scripts/setup.sh`` prints exactly one JSON line on stdout; every install line goes to stderr.
By default it installs only the core; ``--all`` installs the local model and OpenClaw too.

The real setup and bootstrap scripts run in a scratch copy of the repository whose ``.venv`` holds
stand-ins for pip (``FAKE_PYTHON``: prints install chatter on stdout, as pip and the llama.cpp
build do) and for ``society`` (``FAKE_SOCIETY``: prints the one result line), and whose
``scripts/`` holds stand-ins for the part installers (``FAKE_INSTALLER``), so nothing is
installed. Each stand-in appends the command it was given to ``calls.log``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$(dirname "$0")/../../calls.log"
echo "Collecting xllamacpp (stand-in for pip's chatter on stdout)"
echo "  Downloading xllamacpp-2026.10.11549-cp311-cp311-manylinux_2_28_x86_64.whl"
"""
FAKE_SOCIETY = """#!/bin/sh
echo '{"outcome": "ProgramFinished", "exit": "success"}'
"""
FAKE_INSTALLER = """#!/bin/sh
echo "$(basename "$0") PYTHON=${PYTHON:-}" >> "$(dirname "$0")/../calls.log"
echo "$(basename "$0"): installing (stand-in chatter on stdout)"
"""
INSTALLERS = ("install-sandbox.sh", "install-llm.sh", "install-openclaw.sh", "install-nanoclaw.sh")


def _scratch_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "bootstrap.sh"):
        shutil.copy2(ROOT / "scripts" / name, repo / "scripts" / name)
    for name in INSTALLERS:
        (repo / "scripts" / name).write_text(FAKE_INSTALLER)
        (repo / "scripts" / name).chmod(0o755)
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
    assert "Collecting xllamacpp" in done.stderr


def test_setup_prints_exactly_one_json_line(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path)
    done = subprocess.run(
        [str(repo / "scripts" / "setup.sh")], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert json.loads(lines[0])["exit"] == "success"
    assert "Downloading xllamacpp" in done.stderr


def _calls(repo: Path, *args: str) -> list[str]:
    """Run the real ``scripts/setup.sh ARGS`` in ``repo``; the commands its installs ran."""
    (repo / "calls.log").unlink(missing_ok=True)
    done = subprocess.run(
        [str(repo / "scripts" / "setup.sh"), *args], capture_output=True, text=True, check=True
    )
    assert len(done.stdout.splitlines()) == 1, done.stdout  # only the result line
    log = repo / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_setup_installs_only_the_core_and_the_sandbox_by_default(tmp_path: Path) -> None:
    calls = _calls(_scratch_repo(tmp_path))
    assert "python -m pip install --quiet -e ." in calls, calls
    programs = [call.split()[0] for call in calls]
    assert "install-sandbox.sh" in programs
    assert "install-llm.sh" not in programs and "install-openclaw.sh" not in programs
    assert "install-nanoclaw.sh" not in programs
    assert not [call for call in calls if "[dev]" in call]


def test_setup_all_installs_the_dev_tools_the_local_model_and_openclaw(tmp_path: Path) -> None:
    calls = _calls(_scratch_repo(tmp_path), "--all")
    assert "python -m pip install --quiet -e .[dev]" in calls, calls
    assert "install-llm.sh PYTHON=.venv/bin/python" in calls  # into the project's environment
    programs = [call.split()[0] for call in calls]
    assert "install-sandbox.sh" in programs and "install-openclaw.sh" in programs
    assert "install-nanoclaw.sh" in programs


def test_bootstrap_installs_the_package_once_and_the_dev_tools_once_asked(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path)
    assert [c for c in _calls(repo) if "pip install" in c] == [
        "python -m pip install --quiet --upgrade pip",
        "python -m pip install --quiet -e .",
    ]
    assert not [c for c in _calls(repo) if "pip" in c]  # installed: the core's stamp holds
    assert "python -m pip install --quiet -e .[dev]" in _calls(repo, "--all")
    assert not [c for c in _calls(repo, "--all") if "pip" in c]
    assert not [c for c in _calls(repo) if "pip" in c]  # the dev install includes the core
    (repo / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + "\n# changed\n")
    assert "python -m pip install --quiet -e ." in _calls(repo)  # a changed pyproject.toml


def test_bootstrap_refuses_an_unknown_option(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path)
    done = subprocess.run(
        [str(repo / "scripts" / "bootstrap.sh"), "--everything"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "usage: scripts/bootstrap.sh [--all]" in done.stderr
    assert not (repo / "calls.log").exists()  # nothing was installed


FAKE_GO = """#!/bin/sh
echo "go: downloading example.com/chatter v1.0.0" >&2
exit 1
"""


def _build_with_go(
    tmp_path: Path, script: str, go: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<script>`` with ``go`` (a shell script) as the only Go on its PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "go").write_text(go)
    (tools / "go").chmod(0o755)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        capture_output=True,
        text=True,
        env={"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(tmp_path), **env},
        check=False,
    )


def test_the_control_plane_build_keeps_the_go_tools_chatter_in_its_log(tmp_path: Path) -> None:
    out = tmp_path / "cache"
    build = _build_with_go(
        tmp_path, "build-control-plane.sh", FAKE_GO, {"SOCIETY_CONTROL_PLANE_DIR": str(out)}
    )
    assert build.returncode == 1 and build.stdout == ""  # stdout carries only the directory
    first_step = next(line for line in build.stderr.splitlines() if "building " in line)
    assert first_step.startswith("build-control-plane: ERROR: building kube-apiserver")  # the step
    [log] = out.glob("*/build.log")
    assert "go: downloading example.com/chatter" in log.read_text()
    assert f"the whole Go output is in {log}" in build.stderr  # and a failure shows its tail


FAKE_GO_TOOLS = """#!/bin/sh
# go as build-tools.sh calls it: mod download -json, install PKG@V (GOBIN), build -o OUT.
case "$1" in
  env) exit 0 ;;
  mod) mkdir -p "$FAKE_MODULE/cmd/tofu"; printf '{\\n\\t"Dir": "%s",\\n}\\n' "$FAKE_MODULE" ;;
  install)
    for arg in "$@"; do package="$arg"; done
    name=$(basename "${package%@*}")
    echo "go: downloading $name (stand-in chatter)"
    if [ "$name" = "$FAKE_BROKEN" ]; then echo "$name: a compile error" >&2; exit 1; fi
    touch "$GOBIN/$name" && chmod +x "$GOBIN/$name" ;;
  build)
    while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done
    touch "$out" && chmod +x "$out" ;;
esac
"""


def test_a_tool_that_does_not_build_fails_the_tools_build_naming_it(tmp_path: Path) -> None:
    """Two lanes build at once (tofu; the rest in order): a failure in one is reported with its
    log's tail and fails the script, and the lane stops there (nothing after it is built)."""
    out = tmp_path / "cache"
    build = _build_with_go(
        tmp_path,
        "build-tools.sh",
        FAKE_GO_TOOLS,
        {
            "SOCIETY_TOOLS_DIR": str(out),
            "FAKE_MODULE": str(tmp_path / "module"),
            "FAKE_BROKEN": "tflint",
        },
    )
    assert build.returncode == 1 and build.stdout == "", build.stderr
    assert "build-tools: ERROR: building tflint" in build.stderr
    assert "tflint: a compile error" in build.stderr  # the log's tail
    assert "build-tools: ERROR: a tool did not build" in build.stderr
    [bin_dir] = out.glob("*/bin")
    built = sorted(p.name for p in bin_dir.iterdir())
    assert built == ["helm", "tofu"], built  # the other lane finished; this one stopped
