"""Honest pinning: "pinned" covers only what a signature by the pinned key covers; forgeries of an
incomplete ledger, deep nesting and unusable keys end in a typed reason, never a traceback."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from ledger_testkit import catalog, chained_record, forge, record_lines, write_ledger

from ledger import LedgerError, LedgerVerificationError, SigningKey, open_ledger_artifacts
from ledger.canonical import MAX_NESTING, canonical_json
from ledger.format import COMPLETION, LEDGER_FORMAT_VERSION, MANIFEST, RECORDS
from ledger.signing import load_trusted_key
from ledger.verification import verify_ledger


@pytest.fixture
def operator() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def ledger_dir(tmp_path: Path, operator: SigningKey) -> Path:
    return write_ledger(tmp_path / "ledger", 6, key=operator)


def test_a_complete_pinned_ledger_signs_every_record(
    ledger_dir: Path, operator: SigningKey
) -> None:
    verified = verify_ledger(catalog, ledger_dir, trusted_key=operator.public_key)
    assert verified.signature == "pinned" and verified.signed_by == "completion"
    assert (verified.signed_records, verified.unsigned_records) == (7, 0)


def test_a_ledger_fabricated_with_only_the_public_key_is_not_pinned(
    ledger_dir: Path, operator: SigningKey
) -> None:
    # The forger knows the operator's public key, nothing more: they write their own records, name
    # the operator's key in the manifest, and can sign neither a checkpoint nor a completion.
    def fabricated(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows = [row for row in rows if row["producer"] != "ledger"]
        rows[1]["event"]["text"] = "words alice never said"
        return rows

    forge(ledger_dir, SigningKey.generate(), records=fabricated)
    (ledger_dir / COMPLETION).unlink()
    verified = verify_ledger(
        catalog, ledger_dir, trusted_key=operator.public_key, allow_incomplete=True
    )
    assert verified.signature == "unsigned", "no signature by the pinned key covers anything"
    assert (verified.signed_records, verified.unsigned_records) == (0, 6)
    assert verified.signed_by is None
    view = open_ledger_artifacts(
        catalog, ledger_dir, trusted_key=operator.public_key, allow_incomplete=True
    )
    assert view.signature == "unsigned" and view.signed_records == 0


def test_a_record_appended_after_the_last_checkpoint_is_reported_unsigned(
    ledger_dir: Path, operator: SigningKey
) -> None:
    (ledger_dir / COMPLETION).unlink()
    with (ledger_dir / RECORDS).open("ab") as records:
        records.write(chained_record(ledger_dir, "alice", "alice agrees to pay 1000"))
    verified = verify_ledger(
        catalog, ledger_dir, trusted_key=operator.public_key, allow_incomplete=True
    )
    assert len(verified.envelopes) == 8
    assert verified.signature == "pinned" and verified.signed_by == "checkpoint"
    # The checkpoint at #6 signs records #0-#5; its own line and the forged #7 are not signed.
    assert (verified.signed_records, verified.unsigned_records) == (6, 2)
    forged = verified.envelopes[7]
    assert forged.event["text"] == "alice agrees to pay 1000"
    assert forged.logical_sequence >= verified.signed_records


def test_a_crashed_ledger_is_signed_up_to_its_last_checkpoint(
    ledger_dir: Path, operator: SigningKey
) -> None:
    (ledger_dir / COMPLETION).unlink()
    verified = verify_ledger(
        catalog, ledger_dir, trusted_key=operator.public_key, allow_incomplete=True
    )
    assert verified.signature == "pinned" and verified.last_checkpoint == 6
    assert (verified.signed_records, verified.unsigned_records) == (6, 1)


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5_000, 200_000])
@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (MANIFEST, "manifest-invalid"),
        (RECORDS, "record-invalid"),
        (COMPLETION, "completion-invalid"),
    ],
)
def test_deep_nesting_anywhere_is_a_typed_reason(
    ledger_dir: Path, target: str, reason: str, depth: int
) -> None:
    if target == MANIFEST:
        manifest = json.loads((ledger_dir / MANIFEST).read_bytes())
        text = canonical_json(manifest).decode()
        data = text.replace('"metadata":{', f'"metadata":{{"deep":{_nested(depth)},', 1).encode()
    elif target == RECORDS:
        lines = record_lines(ledger_dir)
        text = lines[2].decode()
        lines[2] = text.replace('"event":{', f'"event":{{"deep":{_nested(depth)},', 1).encode()
        data = b"".join(lines)
    else:
        data = f'{{"ledgerFormatVersion":{LEDGER_FORMAT_VERSION},"x":{_nested(depth)}}}'.encode()
    (ledger_dir / target).write_bytes(data)
    with pytest.raises(LedgerVerificationError) as caught:
        verify_ledger(catalog, ledger_dir)
    assert caught.value.reason == reason
    assert f"more than {MAX_NESTING} deep" in caught.value.detail


def test_nesting_up_to_the_limit_verifies(tmp_path: Path) -> None:
    ledger_dir = tmp_path / "ledger"
    write_ledger(ledger_dir, 2)
    depth = MAX_NESTING - 1  # the manifest object itself is the first level
    deep: Any = 1
    for _ in range(depth - 1):
        deep = {"a": deep}
    forge(
        ledger_dir,
        SigningKey.generate(),
        manifest=lambda m: m["metadata"].update(deep=deep),
        set_public_key=True,
    )
    assert len(open_ledger_artifacts(catalog, ledger_dir)) == 3


def _unsupported_curve_pem() -> str:
    """An EC public key on secp112r1, a curve the cryptography package does not support."""

    def tlv(tag: int, body: bytes) -> bytes:
        return bytes([tag, len(body)]) + body

    algorithm = tlv(0x06, bytes.fromhex("2a8648ce3d0201")) + tlv(0x06, bytes.fromhex("2b81040006"))
    spki = tlv(0x30, tlv(0x30, algorithm) + tlv(0x03, b"\x00\x04" + b"\x01" * 28))
    body = base64.b64encode(spki).decode()
    return f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"


def _rsa_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (_unsupported_curve_pem(), "bad-public-key"),
        ("RSA", "bad-public-key"),
        ("ed25519:" + base64.b64encode(b"\x01" * 31).decode(), "bad-public-key"),
        ("ed25519:not base64!", "bad-public-key"),
        (
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "trusted-key-unreadable",
        ),
        (
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
            "trusted-key-unreadable",
        ),
    ],
    ids=["ec-unsupported-curve", "rsa", "short-raw-key", "not-base64", "bad-private", "encrypted"],
)
def test_an_unusable_trusted_key_is_a_typed_reason(tmp_path: Path, text: str, reason: str) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(_rsa_pem() if text == "RSA" else text)
    with pytest.raises(LedgerError) as caught:
        load_trusted_key(key_file)
    assert caught.value.reason == reason, caught.value.detail


@pytest.mark.parametrize(
    "public_key",
    [
        _unsupported_curve_pem(),
        _rsa_pem(),
        "ed25519:" + base64.b64encode(b"\x01" * 33).decode(),
        "ed25519:" + base64.urlsafe_b64encode(b"\xfb" * 32).decode(),  # the URL-safe alphabet
        "ed25519:" + base64.b64encode(b"\xfb" * 32).decode().rstrip("="),  # padding dropped
    ],
    ids=["ec-unsupported-curve", "rsa", "long-raw-key", "urlsafe-base64", "unpadded-base64"],
)
def test_a_manifest_key_in_any_other_form_is_refused(ledger_dir: Path, public_key: str) -> None:
    forge(ledger_dir, SigningKey.generate(), manifest=lambda m: m.update(publicKey=public_key))
    with pytest.raises(LedgerVerificationError) as caught:
        verify_ledger(catalog, ledger_dir)
    assert caught.value.reason == "manifest-invalid", caught.value.detail


def test_a_signature_in_a_second_base64_spelling_does_not_verify(
    ledger_dir: Path, operator: SigningKey
) -> None:
    # Ed25519 signatures are 64 bytes: the last base64 digit carries 2 bits and 4 zero bits.
    # Setting those spare bits spells the same bytes differently; the format allows one spelling.
    completion = json.loads((ledger_dir / COMPLETION).read_bytes())
    signature = completion["signature"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(signature[-3])
    respelled = signature[:-3] + alphabet[last | 0b1111] + "=="
    assert base64.b64decode(respelled) == base64.b64decode(signature)
    completion["signature"] = respelled
    (ledger_dir / COMPLETION).write_bytes(canonical_json(completion))
    with pytest.raises(LedgerVerificationError) as caught:
        verify_ledger(catalog, ledger_dir, trusted_key=operator.public_key)
    assert caught.value.reason == "signature-invalid"


@pytest.mark.parametrize(
    ("target", "data", "reason"),
    [
        (MANIFEST, None, "non-canonical-json"),  # trailing newline
        (COMPLETION, None, "non-canonical-json"),
        (COMPLETION, b'{"ledgerFormatVersion":1,"ledgerFormatVersion":1}', "duplicate-key"),
        (RECORDS, b'{"a":NaN}\n', "record-invalid"),
        (RECORDS, b'{"a":1e400}\n', "non-canonical-json"),
        (RECORDS, b'{"a":"\\ud800"}\n', "record-invalid"),
        (RECORDS, b'{"a":"\xff"}\n', "record-invalid"),
        (RECORDS, b"[]\n", "record-invalid"),
        (RECORDS, b"\n", "record-invalid"),
    ],
    ids=[
        "manifest-newline",
        "completion-newline",
        "completion-duplicate",
        "nan",
        "infinity",
        "lone-surrogate",
        "invalid-utf8",
        "array-line",
        "empty-line",
    ],
)
def test_malformed_bytes_are_a_typed_reason(
    ledger_dir: Path, target: str, data: bytes | None, reason: str
) -> None:
    path = ledger_dir / target
    path.write_bytes(path.read_bytes() + b"\n" if data is None else data)
    with pytest.raises(LedgerVerificationError) as caught:
        verify_ledger(catalog, ledger_dir)
    assert caught.value.reason == reason, caught.value.detail
