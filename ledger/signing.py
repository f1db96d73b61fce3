"""Ed25519 signing keys for ledgers: a fresh key per ledger by default, or an operator's key."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger.errors import LedgerError

_PREFIX = "ed25519:"


class SigningKey:
    """A private Ed25519 key held only by the process that writes the ledger."""

    __slots__ = ("_private",)

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path | str) -> SigningKey:
        """Load a PEM (PKCS#8) Ed25519 private key (``openssl genpkey -algorithm ed25519``)."""
        try:
            key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise LedgerError(
                f"cannot load signing key {path}: {exc}; pass a PEM PKCS#8 Ed25519 private key",
                reason="signing-key-unreadable",
            ) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise LedgerError(f"{path} is not an Ed25519 key", reason="signing-key-unreadable")
        return cls(key)

    def private_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public_key(self) -> str:
        return encode_public_key(self._private.public_key())

    def sign(self, data: bytes) -> str:
        return base64.b64encode(self._private.sign(data)).decode("ascii")


def encode_public_key(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _PREFIX + base64.b64encode(raw).decode("ascii")


def decode_public_key(text: str) -> Ed25519PublicKey:
    """Parse ``ed25519:<base64>`` or a PEM public key."""
    text = text.strip()
    if text.startswith(_PREFIX):
        return decode_ledger_key(text)
    try:
        key = serialization.load_pem_public_key(text.encode("ascii"))
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise LedgerError(
            f"not an Ed25519 public key: {exc}; pass 'ed25519:<base64>' or a PEM Ed25519 key",
            reason="bad-public-key",
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise LedgerError(
            f"the public key is {type(key).__name__.lstrip('_')}, not Ed25519; pass the public "
            f"half of the Ed25519 key the ledger was signed with",
            reason="bad-public-key",
        )
    return key


def decode_ledger_key(text: str) -> Ed25519PublicKey:
    """Parse the one spelling a manifest may use: ``ed25519:`` and the canonical standard base64
    (RFC 4648 section 4, padded) of the 32-byte raw key."""
    raw = _strict_base64(text[len(_PREFIX) :]) if text.startswith(_PREFIX) else None
    try:
        if raw is not None and len(raw) == 32:
            return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        pass
    raise LedgerError(
        f"{text[:60]!r} is not 'ed25519:' followed by the padded standard base64 of a 32-byte "
        f"Ed25519 public key",
        reason="bad-public-key",
    )


def _strict_base64(text: str) -> bytes | None:
    """The bytes ``text`` spells in canonical padded standard base64, or None for any other text."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def load_trusted_key(path: Path | str) -> str:
    """Read a pinned public key file (``ed25519:<base64>`` or PEM) into its canonical text form."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError(
            f"cannot read trusted key {path}: {exc}; pass a file holding 'ed25519:<base64>' or a "
            f"PEM public key",
            reason="trusted-key-unreadable",
        ) from exc
    if "PRIVATE KEY" in text:
        try:
            return SigningKey.load(path).public_key
        except LedgerError as exc:
            raise LedgerError(exc.detail, reason="trusted-key-unreadable") from None
    return canonical_public_key(text)


def canonical_public_key(text: str) -> str:
    """``ed25519:<base64>`` for any accepted spelling of a public key (so keys compare as text)."""
    return encode_public_key(decode_public_key(text))


def signature_checker(key: Ed25519PublicKey) -> Callable[[str, bytes], bool]:
    """A ``check(signature, data) -> bool`` bound to one decoded key (decoded once, used often)."""

    def check(signature: str, data: bytes) -> bool:
        raw = _strict_base64(signature)
        if raw is None or len(raw) != 64:
            return False
        try:
            key.verify(raw, data)
        except InvalidSignature:
            return False
        return True

    return check
