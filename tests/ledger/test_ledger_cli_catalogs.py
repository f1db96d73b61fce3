"""The reader's catalog in ``society ledger verify|show|follow``: the shipped runtimes' events
decode by default, ``--strict-catalog`` wants exactly the ledger's tags, ``follow`` waits."""

from __future__ import annotations

import importlib
import json
import pkgutil
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from test_ledger_cli import society

import controller.agents
from controller import Event, RunSpec
from controller.agents import RuntimeDescriptor, peer, scripted
from controller.agents.llm import LLMRuntime
from controller.agents.peer import PeerStopped
from controller.agents.shipped import SHIPPED_RUNTIMES
from controller.modelgateway.events import AgentModelUsage
from ledger import Provenance, open_ledger_writer


class Noted(Event):
    tag: ClassVar[str] = "acme.noted/v1"

    text: str


async def _nothing(ctx: Any) -> None:
    return None


def _agent(runtime: str) -> RuntimeDescriptor:
    if runtime == "llm":
        return LLMRuntime()
    if runtime == "peer":
        return peer("p.py", "respond", files={"p.py": "def respond(received):\n    return None\n"})
    return scripted()


def _spec(runtime: str) -> RunSpec:
    agent = _agent(runtime)
    return RunSpec.define(
        id="acme.catalogs/v1", events=[Noted], agents={"a": agent}, execute=_nothing
    )


CUSTOMER_MODULE = """
from controller import EventCatalog
from test_ledger_cli_catalogs import Noted
catalog = EventCatalog.make(Noted)
"""


def _write(directory: Path, runtime: str, *, delay: float = 0.0) -> None:
    """A ledger as a run with one agent of ``runtime`` writes it: its catalog and roster."""
    spec = _spec(runtime)

    async def main() -> None:
        await anyio.sleep(delay)
        async with open_ledger_writer(
            directory,
            catalog=spec.catalog,
            definition_id=spec.id,
            run_id="sr-" + "5" * 32,
            provenance=Provenance(package_version="0", python_version="3", profile="test"),
            metadata={"roster": {"a": runtime}},
        ) as writer:
            if runtime == "llm":
                usage = AgentModelUsage(
                    agent="a", provider="local", model="m", prompt_tokens=3,
                    completion_tokens=4, latency_ms=1.0, cost_usd=None, attempts=1,
                )  # fmt: skip
                await writer.append(usage, producer="gateway")
            if runtime == "peer":
                stopped = PeerStopped(
                    agent="a", outcome="completed", received=1, sent=0, policy_calls=2,
                    policy_errors=0, last_policy_error=None, limit="max-sends", unsent=4,
                    published={"mood": "calm"},
                )  # fmt: skip
                await writer.append(stopped, producer="runtime:a")
            await writer.append(Noted(text="hello"), producer="program")
            await writer.complete()

    anyio.run(main)


@pytest.fixture
def customer_module(tmp_path: Path) -> Path:
    path = tmp_path / "customer.py"
    path.write_text(CUSTOMER_MODULE)
    return path


def _line(text: str) -> dict[str, Any]:
    lines = text.strip().splitlines()
    assert lines, text
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def test_verify_decodes_the_shipped_runtimes_events_without_a_catalog(
    tmp_path: Path, capsys: Any
) -> None:
    _write(tmp_path / "ledger", "llm")
    assert society("ledger", "verify", str(tmp_path / "ledger")) == 0
    line = _line(capsys.readouterr().out)
    assert line["notDecoded"] == {"acme.noted/v1": 1}  # the usage record decoded


@pytest.mark.parametrize(
    ("runtime", "shown"),
    [
        ("llm", ("society.agent-model-usage/v1", "promptTokens=3")),
        ("peer", ("society.peer-stopped/v2", "policyCalls=2", 'limit="max-sends"')),
    ],
)
def test_show_decodes_the_shipped_runtimes_events(
    tmp_path: Path, capsys: Any, runtime: str, shown: tuple[str, str]
) -> None:
    _write(tmp_path / "ledger", runtime)
    assert society("ledger", "show", str(tmp_path / "ledger"), "--color", "never") == 0
    out = capsys.readouterr().out
    assert all(text in out for text in shown), out
    (not_decoded,) = [line for line in out.splitlines() if "not decoded" in line]
    assert not_decoded.endswith(": acme.noted/v1")  # only the customer event


def test_every_runtime_under_controller_agents_is_a_shipped_one() -> None:
    """A runtime added beside the others decodes without ``--catalog`` only once it is listed."""
    for info in pkgutil.iter_modules(controller.agents.__path__, "controller.agents."):
        importlib.import_module(info.name)
    defined = {
        cls.runtime: f"{cls.__module__}:{cls.__qualname__}"
        for cls in _subclasses(RuntimeDescriptor)
        if cls.__module__.startswith("controller.agents.") and "runtime" in vars(cls)
    }
    assert defined == dict(SHIPPED_RUNTIMES)


def _subclasses(cls: type) -> list[type]:
    return [sub for child in cls.__subclasses__() for sub in (child, *_subclasses(child))]


def test_strict_catalog_merges_the_runtimes_the_ledger_ran(
    tmp_path: Path, customer_module: Path, capsys: Any
) -> None:
    _write(tmp_path / "llm", "llm")
    _write(tmp_path / "scripted", "scripted")
    for name in ("llm", "scripted"):
        argv = ("ledger", "verify", str(tmp_path / name), "--catalog", str(customer_module))
        assert society(*argv, "--strict-catalog") == 0, capsys.readouterr().out
        line = _line(capsys.readouterr().out)
        assert line["valid"] is True and "notDecoded" not in line


def test_strict_catalog_refuses_a_ledger_whose_tags_differ(
    tmp_path: Path, customer_module: Path, capsys: Any
) -> None:
    _write(tmp_path / "ledger", "scripted")
    manifest = tmp_path / "ledger" / "manifest.json"
    wire = json.loads(manifest.read_bytes())
    wire["metadata"]["roster"] = {"a": "llm"}  # claims an llm agent it never declared events of
    from ledger.canonical import canonical_json

    manifest.write_bytes(canonical_json(wire))
    argv = ("ledger", "verify", str(tmp_path / "ledger"), "--catalog", str(customer_module))
    assert society(*argv, "--strict-catalog") == 1
    assert _line(capsys.readouterr().out)["reason"] == "catalog-mismatch"


def test_follow_waits_for_a_ledger_that_does_not_exist_yet(
    tmp_path: Path, customer_module: Path, capsys: Any
) -> None:
    directory = tmp_path / "later" / "ledger"
    writer = threading.Thread(target=_write, args=(directory, "llm"), kwargs={"delay": 0.5})
    writer.start()
    try:
        argv = ("ledger", "follow", str(directory), "--json", "--poll", "0.02")
        code = society(*argv, "--timeout", "30", "--catalog", str(customer_module))
    finally:
        writer.join(30)
    captured = capsys.readouterr()
    assert code == 0, captured.out
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [row["event"]["tag"] for row in rows][:2] == [
        "society.agent-model-usage/v1",
        "acme.noted/v1",
    ]
    summary = _line(captured.err)
    assert summary["valid"] is True and summary["notDecoded"] == {}


def test_follow_waits_for_a_run_directory_to_create_its_ledger(tmp_path: Path, capsys: Any) -> None:
    run_dir = tmp_path / "sr-later"
    writer = threading.Thread(
        target=_write, args=(run_dir / "ledger" / "main", "scripted"), kwargs={"delay": 0.3}
    )
    writer.start()
    try:
        code = society("ledger", "follow", str(run_dir), "--json", "--timeout", "30")
    finally:
        writer.join(30)
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert _line(captured.err)["notDecoded"] == {"acme.noted/v1": 1}


def test_follow_waits_while_a_run_directory_has_an_empty_ledger_folder(
    tmp_path: Path, capsys: Any
) -> None:
    """The run makes ``ledger/`` before the ledger inside it: that moment is not an error."""
    run_dir = tmp_path / "sr-later"
    (run_dir / "ledger").mkdir(parents=True)
    writer = threading.Thread(
        target=_write, args=(run_dir / "ledger" / "main", "scripted"), kwargs={"delay": 0.3}
    )
    writer.start()
    try:
        code = society("ledger", "follow", str(run_dir), "--json", "--timeout", "30")
    finally:
        writer.join(30)
    assert code == 0, capsys.readouterr().out


def test_follow_gives_up_after_its_timeout(tmp_path: Path, capsys: Any) -> None:
    before = time.monotonic()
    code = society(
        "ledger", "follow", str(tmp_path / "never"), "--timeout", "0.3", "--poll", "0.05"
    )
    assert code == 1 and time.monotonic() - before >= 0.3
    failure = _line(capsys.readouterr().out)
    assert failure["reason"] == "manifest-missing" and "--timeout" in failure["detail"]
