"""Fuzz: whatever bytes or JSON stand in a ledger's files, verifying gives a typed reason or a
verdict, never another exception; the CLI always prints its one JSON line."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_testkit import catalog, write_ledger

from controller.cli import ledger_commands
from ledger import LedgerError, LedgerVerificationError, SigningKey, verification_reasons
from ledger.canonical import NonCanonicalError, canonical_json, parse_canonical
from ledger.format import COMPLETION, MANIFEST, RECORDS
from ledger.reasons import INPUT_REASONS, VERIFICATION_REASONS
from ledger.signing import load_trusted_key
from ledger.verification import verify_ledger

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def nested(draw: st.DrawFn) -> bytes:
    """Arrays and objects nested from a few levels to far past any limit, maybe unbalanced."""
    depth = draw(st.integers(1, 3_000))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    closing = draw(st.integers(0, depth))
    return opener * depth + b"1" + closer * closing


@st.composite
def edited_json(draw: st.DrawFn, original: bytes) -> bytes:
    """A genuine line or file with one key's value replaced by arbitrary JSON (or deep JSON)."""
    value = json.loads(original)
    if not isinstance(value, dict) or not value:
        return original
    key = draw(st.sampled_from(sorted(value)))
    replacement = draw(json_values | nested().map(lambda raw: {"raw": raw.decode()}))
    value[key] = replacement
    return canonical_json(value)


garbage = st.binary(max_size=300) | nested() | json_values.map(canonical_json)


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SigningKey]:
    key = SigningKey.generate()
    return write_ledger(tmp_path_factory.mktemp("fuzz") / "ledger", 5, key=key), key


@contextlib.contextmanager
def _copy(directory: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "ledger"
        shutil.copytree(directory, copy)
        yield copy


def _verdict(directory: Path, key: SigningKey, *, allow_incomplete: bool) -> str:
    """The reason verification gives, or the signature of a ledger that verified."""
    try:
        verified = verify_ledger(
            catalog, directory, trusted_key=key.public_key, allow_incomplete=allow_incomplete
        )
    except LedgerVerificationError as exc:
        assert exc.reason in VERIFICATION_REASONS, exc.reason
        assert exc.detail
        return exc.reason
    assert 0 <= verified.signed_records <= len(verified.envelopes)
    return verified.signature


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), target=st.sampled_from([MANIFEST, RECORDS, COMPLETION]))
def test_any_bytes_in_any_file_give_a_typed_reason(
    genuine: tuple[Path, SigningKey], data: st.DataObject, target: str
) -> None:
    directory, key = genuine
    with _copy(directory) as copy:
        path = copy / target
        if target == RECORDS and data.draw(st.booleans(), label="one line"):
            lines = path.read_bytes().splitlines(keepends=True)
            index = data.draw(st.integers(0, len(lines) - 1), label="line")
            body = lines[index].rstrip(b"\n")
            new = data.draw(garbage | edited_json(body), label="replacement")
            lines[index] = new + b"\n"
            path.write_bytes(b"".join(lines))
        else:
            whole = garbage if target == RECORDS else garbage | edited_json(path.read_bytes())
            new = data.draw(whole, label="file")
            path.write_bytes(new)
        original = (directory / target).read_bytes()
        allow_incomplete = data.draw(st.booleans(), label="incomplete")
        if _verdict(copy, key, allow_incomplete=allow_incomplete) == "pinned":
            assert path.read_bytes() == original, "a changed file still verified as pinned"


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from([MANIFEST, RECORDS, COMPLETION]), new=garbage)
def test_the_verify_command_always_prints_one_json_line(
    genuine: tuple[Path, SigningKey], target: str, new: bytes
) -> None:
    directory, _ = genuine
    with _copy(directory) as copy:
        (copy / target).write_bytes(new)
        out = io.StringIO()
        args = _verify_args(copy)
        with contextlib.redirect_stdout(out):
            code = args.handler(args)
    [line] = out.getvalue().splitlines()
    result = json.loads(line)
    assert (code == 0) is result["valid"]
    if not result["valid"]:
        assert result["reason"] in verification_reasons()


def _verify_args(directory: Path, command: str = "verify") -> Any:
    parser = argparse.ArgumentParser(prog="society")
    ledger_commands.add_commands(parser.add_subparsers(dest="command", required=True))
    extra = ["--allow-incomplete"] if command == "verify" else ["--color", "never"]
    return parser.parse_args(["ledger", command, str(directory), *extra])


hostile_text = st.text(
    st.characters(codec="utf-8", categories=("Cc", "Cf", "Zl", "Zp", "Lu")), max_size=12
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), target=st.sampled_from([MANIFEST, RECORDS]))
def test_show_survives_any_ledger_and_never_prints_a_control_character(
    genuine: tuple[Path, SigningKey], data: st.DataObject, target: str
) -> None:
    directory, _ = genuine
    with _copy(directory) as copy:
        path = copy / target
        lines = path.read_bytes().splitlines(keepends=True)
        index = data.draw(st.integers(0, len(lines) - 1), label="line")
        value = json.loads(lines[index])
        key = data.draw(st.sampled_from(sorted(value)), label="field")
        value[key] = data.draw(hostile_text | json_values | nested().map(bytes.decode), label="to")
        lines[index] = canonical_json(value) + (b"\n" if target == RECORDS else b"")
        path.write_bytes(b"".join(lines))
        out = io.StringIO()
        args = _verify_args(copy, "show")
        with contextlib.redirect_stdout(out):
            code = args.handler(args)
    assert code in (0, 1)
    own = out.getvalue()  # without colours, show prints no escape sequence of its own
    controls = {c for c in own if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0}
    bidi = {c for c in own if c in "\u061c\u200e\u200f\u2028\u2029" or 0x202A <= ord(c) <= 0x202E}
    bidi |= {c for c in own if 0x2066 <= ord(c) <= 0x2069}
    assert not controls and not bidi, sorted(f"U+{ord(c):04X}" for c in controls | bidi)


@settings(max_examples=150)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_trusted_key_file_is_a_key_or_a_typed_reason(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "key"
        for text in (content, b"-----BEGIN PRIVATE KEY-----\n" + content):
            path.write_bytes(text)
            try:
                load_trusted_key(path)
            except LedgerError as exc:
                assert exc.reason in INPUT_REASONS, exc.reason


@settings(max_examples=300)
@given(json_values)
def test_canonical_bytes_parse_back_to_their_value(value: Any) -> None:
    assert parse_canonical(canonical_json(value)) == value


@settings(max_examples=300)
@given(st.binary(max_size=200) | nested() | json_values.map(lambda v: json.dumps(v).encode()))
def test_parse_canonical_accepts_only_the_canonical_form(data: bytes) -> None:
    try:
        value = parse_canonical(data)
    except NonCanonicalError as exc:
        assert exc.problem in ("not-json", "too-deep", "duplicate-key", "non-canonical")
        return
    assert canonical_json(value) == data
