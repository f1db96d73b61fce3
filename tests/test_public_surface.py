"""The public surface is a list this test holds: the names a researcher imports and their modules.

An experiment, a grader or a suite imports from the facade ``controller`` and opens ledgers with
``ledger``; inside a sandbox, where there is no controller, a peer's policy imports
``society_sandbox.runtimes.peer`` and an agent program its router client from
``society_sandbox.network.client``. Anything not listed here may change. Examples, docs and the
README import only these names, so what they teach is what this test holds.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CONTROLLER = {
    "LLMAgentConfigured": "controller.agents.llm",
    "LLMAgentStopped": "controller.agents.llm",
    "LLMOwner": "controller.agents.llm",
    "LLMRuntime": "controller.agents.llm",
    "LLM_RESOURCES": "controller.agents.llm",
    "llm": "controller.agents.llm",
    "NanoClawAgentConfigured": "controller.agents.nanoclaw",
    "NanoClawRuntime": "controller.agents.nanoclaw",
    "nanoclaw": "controller.agents.nanoclaw",
    "NanoClawOwner": "controller.agents.nanoclaw_owner",
    "OPENCLAW_TRANSCRIPT": "controller.agents.openclaw",
    "OpenClawAgentConfigured": "controller.agents.openclaw",
    "OpenClawRuntime": "controller.agents.openclaw",
    "openclaw": "controller.agents.openclaw",
    "PeerObservation": "controller.agents.peer",
    "PeerObservations": "controller.agents.peer",
    "peer": "controller.agents.peer",
    "BYOOwner": "controller.agents.byo",
    "BYORuntime": "controller.agents.byo",
    "byo": "controller.agents.byo",
    "ScriptedOwner": "controller.agents.scripted",
    "scripted": "controller.agents.scripted",
    "core_events": "controller.events",
    "ConversationOpened": "controller.events.network",
    "LinkMessageDropped": "controller.events.network",
    "RouterMessageCommitted": "controller.events.network",
    "delivered_pairs": "controller.events.network",
    "AgentWorkspaceFileHarvested": "controller.events.run",
    "ProgramSucceeded": "controller.events.run",
    "RunStarted": "controller.events.run",
    "ProviderConfig": "controller.modelgateway.config",
    "AgentModelBudgetReached": "controller.modelgateway.events",
    "AgentModelCallFailed": "controller.modelgateway.events",
    "AgentModelUsage": "controller.modelgateway.events",
    "PlatformLost": "controller.run",
    "ProgramFinished": "controller.run",
    "Run": "controller.run",
    "RunContext": "controller.run",
    "RunSpec": "controller.run",
    "load_run_spec": "controller.run",
    "ForkPoint": "controller.run.fork",
    "Suite": "controller.suites.definition",
    "load_suite": "controller.suites.definition",
    "Event": "ledger.events",
    "EventCatalog": "ledger.events",
    "Delivery": "society_sandbox.network.protocol",
    "Budget": "society_sandbox.runtimes.llm",
    "ContextPolicy": "society_sandbox.runtimes.llm",
    "ReplyPolicy": "society_sandbox.runtimes.llm",
    "OpenClawRPC": "society_sandbox.runtimes.openclaw_rpc",
    "Opening": "society_sandbox.runtimes.scripted",
    "ReplyDelay": "society_sandbox.runtimes.scripted",
    "Rule": "society_sandbox.runtimes.scripted",
    "ScriptedPolicy": "society_sandbox.runtimes.scripted",
}
"""The facade's names and the module each is defined in."""
LEDGER = {
    "CatalogError",
    "DurableFiles",
    "Event",
    "EventCatalog",
    "LedgerArtifacts",
    "LedgerCheckpoint",
    "LedgerCompletionConflict",
    "LedgerEncodingError",
    "LedgerError",
    "LedgerExistsError",
    "LedgerReceipt",
    "LedgerStop",
    "LedgerVerificationError",
    "LedgerWriteError",
    "LedgerWriter",
    "Provenance",
    "Record",
    "RecordEnvelope",
    "SigningKey",
    "VERIFICATION_REASONS",
    "ledger_catalog",
    "ledger_directory",
    "open_ledger_artifacts",
    "open_ledger_writer",
    "verification_reasons",
    "verify_ledger",
}
SANDBOX_SIDE = {
    "society_sandbox.runtimes.peer": {"Decision", "Message", "PolicyError", "Received", "Say"},
    "society_sandbox.network.client": {"AgentSession", "connect_agent", "connect_sandbox_agent"},
}
"""The documented modules a program inside a sandbox imports, and the names it may use."""
PUBLIC = {"controller": set(CONTROLLER), "ledger": LEDGER, **SANDBOX_SIDE}


def test_the_facade_exports_exactly_the_listed_names() -> None:
    import controller

    assert dict(controller._EXPORTS) == CONTROLLER
    assert sorted(controller.__all__) == sorted(CONTROLLER)


@pytest.mark.parametrize("name", sorted(CONTROLLER))
def test_each_facade_name_is_what_its_module_defines(name: str) -> None:
    import controller

    assert getattr(controller, name) is getattr(importlib.import_module(CONTROLLER[name]), name)


def test_the_ledger_facade_exports_exactly_the_listed_names() -> None:
    import ledger

    assert set(ledger.__all__) == LEDGER
    assert all(getattr(ledger, name) is not None for name in LEDGER)


@pytest.mark.parametrize("module", sorted(SANDBOX_SIDE))
def test_each_sandbox_side_module_defines_its_listed_names(module: str) -> None:
    loaded = importlib.import_module(module)
    assert {name for name in SANDBOX_SIDE[module] if hasattr(loaded, name)} == SANDBOX_SIDE[module]


PROJECT = ("controller", "ledger", "society_sandbox", "agent_images")


def project_imports(source: str) -> list[tuple[str, str | None]]:
    """``(module, name)`` for each name a piece of Python imports from the project."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PROJECT:
                found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] in PROJECT]
    return found


def off_surface(source: str) -> list[str]:
    """The imports in ``source`` of a name or module outside the public surface."""
    return [
        f"{module}:{name}"
        for module, name in project_imports(source)
        if module not in PUBLIC or (name is not None and name not in PUBLIC[module])
    ]


def _python_of(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return text
    # the import lines of a document's Python blocks (its blocks need not run on their own)
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    statement = re.compile(r"^(?:from \S+ import (?:\([^)]*\)|[^\n]+)|import [^\n]+)", re.M)
    return "\n".join(m.group(0) for block in blocks for m in statement.finditer(block))


TEACHING = sorted([*ROOT.glob("examples/**/*.py"), *ROOT.glob("docs/**/*.md"), ROOT / "README.md"])


@pytest.mark.parametrize("path", TEACHING, ids=lambda path: str(path.relative_to(ROOT)))
def test_examples_and_docs_import_only_the_public_surface(path: Path) -> None:
    assert off_surface(_python_of(path)) == []


@pytest.mark.parametrize(
    "source",
    [
        "from controller.events.network import RouterMessageCommitted",
        "from controller import Router",
        "import controller.run.kernel",
        "from society_sandbox.runtimes.llm import Budget",
        "from agent_images.peer.agent import main",
        "from ledger.verify import verify",
    ],
)
def test_an_import_beside_the_surface_is_reported(source: str) -> None:
    assert off_surface(source) != []
