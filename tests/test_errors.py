"""One error tree: every typed error of ``controller`` is a ``SocietyError`` (or, from the evidence
layer, a ``LedgerError``) with its own ``reason``, drawn in ``controller.errors``'s docstring, and
the ``society`` command reports any of them as one error line with its next step."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import controller
import society_sandbox
from controller import cli, errors
from controller.agents.roster import OwnerTypeError
from controller.errors import SetupError, SocietyError
from controller.modelgateway.config import UnknownProviderError
from controller.ops.cluster.steps import StepFailed
from controller.run.request import RunRequestError
from controller.run.runid import RunIdError
from ledger.errors import LedgerError

ROOT = Path(__file__).resolve().parent.parent
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
REASON = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$")
TREE_LINE = re.compile(
    r"^ {4}((?:│   | {4})*)(├── |└── )?([A-Za-z]\w*)"
    r"(?: {2}((?:controller|society_sandbox)\.[\w.]+))?"
)


def _modules() -> list[ModuleType]:
    names = [
        info.name
        for package in (controller, society_sandbox)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    ]
    return [controller, society_sandbox, *(importlib.import_module(name) for name in names)]


def _exceptions(module: ModuleType) -> list[type[BaseException]]:
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    ]


def _sets_a_reason(node: ast.ClassDef) -> bool:
    """The class body names ``reason``, or one of its methods assigns ``self.reason``."""
    for child in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(child, ast.Assign):
            targets = child.targets
        elif isinstance(child, ast.AnnAssign):
            targets = [child.target]
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "reason":
                return True
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "reason"
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                return True
    return False


def _society_errors() -> list[type[SocietyError]]:
    _modules()  # every subclass is defined once its module is imported
    found: list[type[SocietyError]] = []
    pending = [SocietyError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(
            sub
            for sub in cls.__subclasses__()
            if sub.__module__.startswith(("controller", "society_sandbox"))
        )
    return found


def _drawn_tree() -> dict[str, tuple[str | None, str]]:
    """Each class the docstring draws: its parent in the drawing, and the module it names
    (``controller.errors`` where it names none)."""
    doc = errors.__doc__ or ""
    root = "\n\n    SocietyError  society_sandbox.errors\n"
    block = doc.split(root, 1)[1].split("\n\n", 1)[0]
    lines = [root.strip("\n"), *block.splitlines()]
    drawn: dict[str, tuple[str | None, str]] = {}
    path: list[str] = []
    for line in lines:
        match = TREE_LINE.match(line)
        assert match is not None, f"not a line of the tree: {line!r}"
        guides, branch, name, module = match.groups()
        depth = len(guides) // 4 + (1 if branch else 0)
        del path[depth:]
        drawn[name] = (path[-1] if path else None, module or errors.__name__)
        path.append(name)
    return drawn


def test_every_exception_of_controller_that_carries_a_reason_is_in_the_one_tree() -> None:
    outside = []
    for module in _modules():
        if module.__name__.startswith("society_sandbox"):
            continue  # the wall's own framing errors are the sandbox side's, not the controller's
        source = inspect.getsource(module)
        setting = {
            node.name
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ClassDef) and _sets_a_reason(node)
        }
        for cls in _exceptions(module):
            carries = hasattr(cls, "reason") or cls.__name__ in setting
            if carries and not issubclass(cls, SocietyError | LedgerError):
                outside.append(f"{module.__name__}.{cls.__name__}")
    assert outside == []


def test_every_society_error_names_its_own_machine_readable_reason() -> None:
    unnamed = [
        f"{cls.__module__}.{cls.__name__}"
        for cls in _society_errors()
        if not REASON.match(str(vars(cls).get("reason", "")))
    ]
    assert unnamed == []


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    actual: dict[str, tuple[str | None, str]] = {}
    for cls in _society_errors():
        parents = [base for base in cls.__bases__ if issubclass(base, SocietyError)]
        actual[cls.__name__] = (parents[0].__name__ if parents else None, cls.__module__)
    assert _drawn_tree() == actual


def test_the_message_says_what_happened_then_the_next_step() -> None:
    error = SetupError("no module at m.py", reason="module-missing", next_step="pass MODULE.py")
    assert str(error) == "no module at m.py\n  next step: pass MODULE.py"
    assert (error.detail, error.reason, error.next_step) == (
        "no module at m.py",
        "module-missing",
        "pass MODULE.py",
    )
    plain = SetupError("nothing was started")
    assert (str(plain), plain.reason, plain.next_step) == (
        "nothing was started",
        "setup-failed",
        None,
    )
    assert SetupError.reason == "setup-failed", "an instance's reason leaves its class's alone"


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (RunIdError, ValueError),  # argparse's type= and pydantic's validators catch ValueError
        (RunRequestError, ValueError),
        (UnknownProviderError, ValueError),
        (OwnerTypeError, TypeError),
    ],
)
def test_an_error_that_a_builtin_catch_relies_on_keeps_that_base(
    error: type[SocietyError], builtin: type[Exception]
) -> None:
    assert issubclass(error, SocietyError) and issubclass(error, builtin)


def _society(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [*SOCIETY, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_society_run_of_a_missing_module_prints_one_error_and_exits_2(tmp_path: Path) -> None:
    done = _society("run", "absent.py", "--artifacts", str(tmp_path / "artifacts"), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        "society run: error: absent.py is not a file\n"
        "  next step: pass the path of a MODULE.py defining run_spec\n"
    )


def test_society_cancel_of_a_run_that_is_not_live_prints_one_error_and_exits_1(
    tmp_path: Path,
) -> None:
    run_id = "sr-" + "0" * 32
    root = tmp_path / "artifacts"
    done = _society("cancel", run_id, "--artifacts", str(root), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == (
        f"society cancel: error: run {run_id} is not live under {root}\n"
        f"  next step: `society status {run_id}` shows how it ended\n"
    )


@pytest.mark.parametrize(
    ("argv", "commands", "handler", "raised", "line"),
    [
        (
            ["status", "sr-" + "0" * 32],
            "controller.cli.run_commands",
            "_status",
            LedgerError("records.jsonl is torn", reason="record-malformed"),
            "society status: error: records.jsonl is torn\n",
        ),
        (
            ["cluster", "up"],
            "controller.cli.cluster_commands",
            "_up",
            StepFailed("helm failed", reason="helm-failed", next_step="fix it, run it again"),
            "society cluster up: error: helm failed\n  next step: fix it, run it again\n",
        ),
    ],
)
def test_a_typed_error_escaping_a_command_is_one_report_with_exit_1(
    argv: list[str],
    commands: str,
    handler: str,
    raised: Exception,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fails(_args: object) -> int:
        raise raised

    monkeypatch.setattr(importlib.import_module(commands), handler, fails)
    assert cli.main(argv) == 1
    assert capsys.readouterr() == ("", line)
