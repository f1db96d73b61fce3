"""``society ledger verify|show|schema|follow`` and ``society grade``, through their parser."""

from __future__ import annotations

import argparse
import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from ledger_testkit import Counted, Said, catalog, chained_record, forge, write_ledger

from controller.cli import ledger_commands
from ledger import Provenance, SigningKey, open_ledger_writer, tail
from ledger.format import COMPLETION, RECORDS

CATALOG_MODULE = """
from ledger_testkit import catalog
"""
RUN_SPEC_MODULE = """
from types import SimpleNamespace
from ledger_testkit import catalog
run_spec = SimpleNamespace(catalog=catalog)
"""
GRADER_MODULE = """
from ledger_testkit import Counted, Said, catalog

def grade(ledger):
    return {
        "said": sum(1 for _ in ledger.events(Said)),
        "total": sum(event.n for event in ledger.events(Counted)),
        "signature": ledger.signature,
    }
"""


def society(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="society")
    ledger_commands.add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


def _json_line(out: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    result: dict[str, Any] = json.loads(lines[0])
    return result


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def ledger_dir(tmp_path: Path, key: SigningKey) -> Path:
    return write_ledger(tmp_path / "ledger", 6, key=key)


@pytest.fixture
def modules(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, text in [
        ("events", CATALOG_MODULE),
        ("spec", RUN_SPEC_MODULE),
        ("grader", GRADER_MODULE),
        ("empty", "x = 1\n"),
        ("broken", "import no_such_module_anywhere\n"),
    ]:
        paths[name] = tmp_path / f"{name}.py"
        paths[name].write_text(text)
    return paths


def test_verify_prints_one_json_line_and_exits_0(
    ledger_dir: Path, modules: dict[str, Path], key: SigningKey, capsys: Any
) -> None:
    key_file = ledger_dir.parent / "key.pub"
    key_file.write_text(key.public_key + "\n")
    for module in ("events", "spec"):
        code = society(
            "ledger", "verify", str(ledger_dir), "--catalog", str(modules[module]),
            "--trusted-key", str(key_file),
        )  # fmt: skip
        assert code == 0
        assert _json_line(capsys.readouterr().out) == {
            "valid": True,
            "records": 7,
            "runId": "sr-" + "1" * 32,
            "definitionId": "test.definition",
            "signature": "pinned",
            "signedRecords": 7,
            "unsignedRecords": 0,
            "signedBy": "completion",
        }


def test_verify_without_a_catalog_checks_structure_and_leaves_events_undecoded(
    ledger_dir: Path, capsys: Any
) -> None:
    assert society("ledger", "verify", str(ledger_dir)) == 0
    result = _json_line(capsys.readouterr().out)
    assert result["valid"] is True and result["signature"] == "self"
    assert result["notDecoded"] == {"test.counted/v1": 3, "test.said/v1": 3}


def test_verify_without_a_catalog_still_catches_a_broken_chain(
    ledger_dir: Path, capsys: Any
) -> None:
    lines = (ledger_dir / RECORDS).read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"message 1", b"message X")
    (ledger_dir / RECORDS).write_bytes(b"".join(lines))
    assert society("ledger", "verify", str(ledger_dir)) == 1
    result = _json_line(capsys.readouterr().out)
    assert result["valid"] is False and result["reason"] == "chain-broken"
    assert result["record"] == 2 and "record 2" in result["detail"]


def test_verify_against_a_pinned_key_catches_a_re_signed_forgery(
    ledger_dir: Path, key: SigningKey, capsys: Any
) -> None:
    forge(ledger_dir, SigningKey.generate(), set_public_key=True)
    assert society("ledger", "verify", str(ledger_dir)) == 0
    capsys.readouterr()
    key_file = ledger_dir.parent / "key.pem"
    key_file.write_bytes(key.private_pem())
    assert society("ledger", "verify", str(ledger_dir), "--trusted-key", str(key_file)) == 1
    assert _json_line(capsys.readouterr().out)["reason"] == "key-not-trusted"


def test_verify_reports_an_incomplete_ledger_and_its_prefix_on_request(
    ledger_dir: Path, capsys: Any
) -> None:
    (ledger_dir / COMPLETION).unlink()
    assert society("ledger", "verify", str(ledger_dir)) == 1
    assert _json_line(capsys.readouterr().out)["reason"] == "incomplete"
    assert society("ledger", "verify", str(ledger_dir), "--allow-incomplete") == 0
    result = _json_line(capsys.readouterr().out)
    assert result["complete"] is False and result["lastCheckpoint"] == 6
    assert result["stop"]["reason"] == "no-completion" and result["stop"]["records"] == 7
    assert (result["signedRecords"], result["unsignedRecords"]) == (6, 1)
    assert result["signedBy"] == "checkpoint" and result["signature"] == "self"


def test_verify_pinned_and_incomplete_reports_the_unsigned_tail(
    ledger_dir: Path, key: SigningKey, capsys: Any
) -> None:
    # A genuine pinned ledger, completion.json deleted, a record appended after the checkpoint.
    (ledger_dir / COMPLETION).unlink()
    with (ledger_dir / RECORDS).open("ab") as records:
        records.write(chained_record(ledger_dir, "alice", "forged"))
    key_file = ledger_dir.parent / "key.pub"
    key_file.write_text(key.public_key)
    argv = ("ledger", "verify", str(ledger_dir), "--trusted-key", str(key_file))
    assert society(*argv, "--allow-incomplete") == 0
    result = _json_line(capsys.readouterr().out)
    assert result["signature"] == "pinned" and result["records"] == 8
    assert (result["signedRecords"], result["unsignedRecords"]) == (6, 2)
    assert result["signedBy"] == "checkpoint"
    assert society(*argv) == 1
    assert _json_line(capsys.readouterr().out)["reason"] == "incomplete"


def test_verify_prints_a_json_line_for_a_deeply_nested_manifest(
    ledger_dir: Path, capsys: Any
) -> None:
    (ledger_dir / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert society("ledger", "verify", str(ledger_dir)) == 1
    result = _json_line(capsys.readouterr().out)
    assert result["valid"] is False and result["reason"] == "manifest-invalid"


def test_verify_prints_a_json_line_for_a_key_on_an_unsupported_curve(
    ledger_dir: Path, capsys: Any
) -> None:
    spki = bytes.fromhex(
        "3032301006072a8648ce3d020106052b81040006031e0004" + "01" * 28
    )  # an EC key on secp112r1
    key_file = ledger_dir.parent / "ec.pem"
    body = base64.b64encode(spki).decode()
    key_file.write_text(f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
    assert society("ledger", "verify", str(ledger_dir), "--trusted-key", str(key_file)) == 1
    result = _json_line(capsys.readouterr().out)
    assert result["valid"] is False and result["reason"] == "bad-public-key"


def test_verify_refuses_modules_without_a_catalog(
    ledger_dir: Path, modules: dict[str, Path], capsys: Any
) -> None:
    for module, reason in [("empty", "catalog-not-found"), ("broken", "module-unloadable")]:
        assert society("ledger", "verify", str(ledger_dir), "--catalog", str(modules[module])) == 1
        result = _json_line(capsys.readouterr().out)
        assert result["valid"] is False and result["reason"] == reason


def test_show_prints_a_timeline(ledger_dir: Path, capsys: Any) -> None:
    assert society("ledger", "show", str(ledger_dir), "--color", "never") == 0
    out = capsys.readouterr().out
    assert "verified, complete · 7 records · signature self" in out
    assert "definition  test.definition" in out
    timeline = [line for line in out.splitlines() if line.lstrip().startswith("+")]
    assert len(timeline) == 7
    assert "#1" in timeline[1] and "tester" in timeline[1] and "test.said/v1" in timeline[1]
    assert 'speaker="agent-1" text="message 1"' in timeline[1]
    assert "ledger.checkpoint/v1" in timeline[6] and "recordCount=6" in timeline[6]
    assert "by tag: ledger.checkpoint/v1 1 · test.counted/v1 3 · test.said/v1 3" in out


def test_show_marks_a_ledger_that_does_not_verify(ledger_dir: Path, capsys: Any) -> None:
    (ledger_dir / RECORDS).write_bytes((ledger_dir / RECORDS).read_bytes()[:-30])
    assert society("ledger", "show", str(ledger_dir), "--color", "never") == 1
    out = capsys.readouterr().out
    assert "DOES NOT VERIFY (torn-tail)" in out
    assert len([line for line in out.splitlines() if line.lstrip().startswith("+")]) == 6


def test_schema_prints_the_catalogs_json_schema(modules: dict[str, Path], capsys: Any) -> None:
    assert society("ledger", "schema", str(modules["spec"])) == 0
    assert json.loads(capsys.readouterr().out) == catalog.json_schema()


def test_grade_verifies_then_prints_the_graders_result(
    ledger_dir: Path, modules: dict[str, Path], capsys: Any
) -> None:
    assert society("grade", str(modules["grader"]), str(ledger_dir)) == 0
    assert _json_line(capsys.readouterr().out) == {"said": 3, "total": 6, "signature": "self"}
    (ledger_dir / COMPLETION).unlink()
    assert society("grade", str(modules["grader"]), str(ledger_dir)) == 1
    result = _json_line(capsys.readouterr().out)
    assert result == {"valid": False, "reason": "incomplete", "detail": result["detail"]}


def test_a_grader_must_return_a_json_object(ledger_dir: Path, tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad_grader.py"
    bad.write_text("from ledger_testkit import catalog\ndef grade(ledger):\n    return [1]\n")
    assert society("grade", str(bad), str(ledger_dir)) == 1
    assert _json_line(capsys.readouterr().out)["reason"] == "grader-invalid"


def _write_slowly(directory: Path, count: int, started: threading.Event) -> None:
    async def main() -> None:
        async with open_ledger_writer(
            directory,
            catalog=catalog,
            definition_id="test.live",
            run_id="sr-" + "4" * 32,
            provenance=Provenance(package_version="0", python_version="3", profile="test"),
        ) as writer:
            started.set()
            for i in range(count):
                event = Said(speaker="live", text=str(i)) if i % 2 else Counted(n=i)
                await writer.append(event, producer="live")
                await anyio.sleep(0.005)
            await writer.complete()

    anyio.run(main)


def test_follow_prints_records_as_they_commit_and_stops_at_completion(
    tmp_path: Path, capsys: Any
) -> None:
    directory = tmp_path / "live"
    started = threading.Event()
    writer = threading.Thread(target=_write_slowly, args=(directory, 30, started))
    writer.start()
    try:
        assert started.wait(10)
        before = time.monotonic()
        code = society("ledger", "follow", str(directory), "--json", "--poll", "0.02")
    finally:
        writer.join(10)
    assert code == 0 and time.monotonic() - before < 10
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [row["logicalSequence"] for row in rows] == list(range(31))
    assert rows[-1]["event"]["tag"] == "ledger.checkpoint/v1"
    summary = json.loads(captured.err.strip().splitlines()[-1])
    assert summary["valid"] is True and summary["records"] == 31


def test_follow_stops_on_a_line_that_does_not_chain(ledger_dir: Path, capsys: Any) -> None:
    lines = (ledger_dir / RECORDS).read_bytes().splitlines(keepends=True)
    (ledger_dir / RECORDS).write_bytes(b"".join([lines[0], lines[2], *lines[3:]]))
    assert society("ledger", "follow", str(ledger_dir), "--color", "never") == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and "#0" in out[0]
    assert json.loads(out[-1])["reason"] == "sequence-gap"


def test_follow_fsyncs_what_it_read_before_yielding_it(
    ledger_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    monkeypatch.setattr(tail.os, "fsync", lambda fd: events.append("fsync"))
    for envelope in tail.follow_ledger(ledger_dir, poll_interval=0.01):
        events.append(f"record {envelope.logical_sequence}")
    assert events[0] == "fsync" and events[1:] == [f"record {i}" for i in range(7)]


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil\u2066\u200f\u061c\x7f\u2028"


def _hostile_ledger(directory: Path, key: SigningKey) -> Path:
    write_ledger(directory, 3, key=key)

    def hostile(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[1]["producer"] = HOSTILE
        rows[1]["event"]["speaker"] = HOSTILE
        rows[1]["event"][HOSTILE] = HOSTILE  # a field name too (shown undecoded without a catalog)
        return rows

    forge(directory, key, records=hostile, manifest=lambda m: m.update(definitionId=HOSTILE))
    return directory


def _assert_inert(out: str) -> None:
    dangerous = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)] if chr(c) != "\n"]
    dangerous += ["\u202e", "\u2066", "\u200f", "\u061c", "\u2028"]
    found = sorted({f"U+{ord(c):04X}" for c in out if c in dangerous})
    assert found == [], f"raw control or bidi characters reached the terminal: {found}"


@pytest.mark.parametrize("verifies", [True, False], ids=["verified", "does-not-verify"])
def test_show_escapes_control_and_bidi_characters_from_the_ledger(
    tmp_path: Path, key: SigningKey, capsys: Any, verifies: bool
) -> None:
    directory = _hostile_ledger(tmp_path / "hostile", key)
    if not verifies:
        (directory / RECORDS).write_bytes((directory / RECORDS).read_bytes()[:-10])
    society("ledger", "show", str(directory), "--color", "never")
    out = capsys.readouterr().out
    _assert_inert(out)
    assert "\\x1b]0;owned\\x07" in out and "\\u202eevil" in out  # shown, as escapes
    assert ("DOES NOT VERIFY" in out) is not verifies


def test_show_keeps_its_own_colours_but_escapes_the_ledgers(
    tmp_path: Path, key: SigningKey, capsys: Any
) -> None:
    directory = _hostile_ledger(tmp_path / "hostile", key)
    society("ledger", "show", str(directory), "--color", "always")
    out = capsys.readouterr().out
    assert "\x1b[1mrun\x1b[0m" in out  # the header's own bold label
    assert "\x1b]0;" not in out and "\x1b[2J" not in out and "\u202e" not in out


def test_json_lines_escape_control_and_bidi_characters(
    tmp_path: Path, key: SigningKey, capsys: Any
) -> None:
    directory = _hostile_ledger(tmp_path / "hostile", key)
    assert society("ledger", "verify", str(directory)) == 0
    out = capsys.readouterr().out
    _assert_inert(out)
    assert _json_line(out)["definitionId"] == HOSTILE  # the same value, escaped in the text
    assert society("ledger", "follow", str(directory), "--json", "--poll", "0.01") == 0
    captured = capsys.readouterr()
    _assert_inert(captured.out)
    assert json.loads(captured.out.splitlines()[1])["producer"] == HOSTILE
