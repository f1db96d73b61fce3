"""The documentation stays true to the code: its commands parse, its links resolve, the README
stays a newcomer's page and its quick start is ``examples/hello.py``.

Commands are every ``society ...`` line in a fenced shell block of README.md, docs/*.md and
benchmarks/README.md (README.md and docs/cli.md must show some). Each must parse with the real
``society`` parser as written (so an unknown option or a missing argument fails) and with
``--help`` appended. Placeholders such as ``MODULE.py`` or ``RUN_DIR`` are ordinary argument
values. Links are every relative markdown link in the same documents; the file each names must
exist (anchors are not checked), as must every repository path named in a code span.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md")
README_MAX_LINES = 200
SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console"}

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
REPOSITORY_PATH = re.compile(
    r"(?<![\w./-])((?:agent_images|benchmarks|controller|examples|helm|kind|ledger|schemas|scripts"
    r"|terraform|tests)/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "&"}
ENVIRONMENT_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    for match in FENCE.finditer(text):
        yield match.group(1).lower(), match.group(2)


def society_commands(text: str) -> Iterator[list[str]]:
    """The arguments after ``society`` of every command line in the shell blocks of ``text``."""
    for language, body in fenced_blocks(text):
        if language not in SHELL_LANGUAGES:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue  # not a shell line (output shown in a console block)
            while words and ENVIRONMENT_ASSIGNMENT.match(words[0]):
                words = words[1:]
            if not words or not (words[0] == "society" or words[0].endswith("/society")):
                continue
            if len(words) > 1 and words[1].endswith(":"):
                continue  # a message the command printed (`society run: error: ...`)
            arguments: list[str] = []
            for word in words[1:]:
                if word in SHELL_OPERATORS:
                    break
                arguments.append(word)
            yield arguments


def parse_problem(parser: argparse.ArgumentParser, arguments: list[str]) -> str | None:
    """Why the ``society`` parser refuses ``arguments`` (as written, then with ``--help``)."""
    for attempt, expect_help in ((arguments, False), ([*arguments, "--help"], True)):
        output = io.StringIO()
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                parser.parse_args(attempt)
        except SystemExit as exit:
            if exit.code == 0 and expect_help:
                continue
            return f"society {shlex.join(attempt)}: exit {exit.code}: {output.getvalue().strip()}"
        if expect_help:
            return f"society {shlex.join(attempt)}: --help printed no help"
    return None


def relative_links(text: str) -> Iterator[str]:
    """Every link target in ``text`` outside code that names a file in this repository."""
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    for match in LINK.finditer(prose):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, mailto: or an anchor in the same page
        yield target.split("#", 1)[0]


def broken_links(document: Path) -> list[str]:
    text = document.read_text(encoding="utf-8")
    return [
        target
        for target in relative_links(text)
        if not (document.parent / target).resolve().exists()
    ]


def missing_paths(document: Path) -> list[str]:
    """Repository paths the document names in code spans (``controller/run/``) that do not exist."""
    spans = INLINE_CODE.findall(document.read_text(encoding="utf-8"))
    named = {match for span in spans for match in REPOSITORY_PATH.findall(span)}
    # ``ledger/main`` is a run's ledger directory, not the ``ledger`` package
    named = {path for path in named if not path.startswith("ledger/") or path.endswith(".py")}
    return sorted(path for path in named if not (ROOT / path).exists())


def _document_commands() -> list[tuple[str, list[str]]]:
    found = []
    for document in DOCUMENTS:
        for arguments in society_commands(document.read_text(encoding="utf-8")):
            found.append(
                (f"{document.relative_to(ROOT)}: society {shlex.join(arguments)}", arguments)
            )
    return found


DOCUMENT_COMMANDS = _document_commands()


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_the_documents_show_society_commands() -> None:
    shown = {document for document, _ in DOCUMENT_COMMANDS}
    assert len([name for name in shown if name.startswith("README.md")]) >= 4
    assert len([name for name in shown if name.startswith("docs/cli.md")]) >= 20


@pytest.mark.parametrize(
    "arguments",
    [arguments for _, arguments in DOCUMENT_COMMANDS],
    ids=[n for n, _ in DOCUMENT_COMMANDS],
)
def test_every_documented_command_parses(
    parser: argparse.ArgumentParser, arguments: list[str]
) -> None:
    assert parse_problem(parser, arguments) is None


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_every_relative_link_names_an_existing_file(document: Path) -> None:
    assert broken_links(document) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_every_repository_path_named_exists(document: Path) -> None:
    assert missing_paths(document) == []


def test_the_readme_is_a_page_not_a_notebook() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_the_quick_start_is_examples_hello() -> None:
    """The README's Python block is examples/hello.py without its docstring and future import."""
    readme = README.read_text(encoding="utf-8")
    shown = next(body for language, body in fenced_blocks(readme) if language == "python")
    source = (ROOT / "examples" / "hello.py").read_text(encoding="utf-8")
    code = source.split("from __future__ import annotations\n", 1)[1].strip()
    assert shown.strip() == code


def test_a_command_with_an_unknown_option_or_subcommand_is_refused(
    parser: argparse.ArgumentParser,
) -> None:
    assert parse_problem(parser, ["run", "MODULE.py", "--profle", "kind"]) is not None
    assert parse_problem(parser, ["ledger", "verfy", "DIR"]) is not None
    assert parse_problem(parser, ["grade", "GRADER.py"]) is not None  # a missing argument
    assert parse_problem(parser, ["run", "MODULE.py", "--profile", "kind"]) is None


def test_commands_are_found_in_shell_blocks_only() -> None:
    text = (
        "```sh\n.venv/bin/society run a.py --seed 7   # a comment\n"
        "SOCIETY_DEBUG=1 society status RUN_ID | jq .\n```\n"
        "```python\nsociety = 1\n```\n"
        '```console\n$ society ledger verify DIR\n{"valid": true}\n```\n'
    )
    assert list(society_commands(text)) == [
        ["run", "a.py", "--seed", "7"],
        ["status", "RUN_ID"],
        ["ledger", "verify", "DIR"],
    ]


def test_a_broken_relative_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#anchor) [gone](missing.md) [web](https://example.com) [top](#top)\n"
        "`[not a link](nowhere.md)`\n"
    )
    assert broken_links(page) == ["missing.md"]


def test_a_missing_repository_path_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("`controller/run/` and `controller/nowhere.py`; a run's `ledger/main`\n")
    assert missing_paths(page) == ["controller/nowhere.py"]
