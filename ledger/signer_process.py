"""The ledger's signer: the one process that holds a run's private key, and what it will sign.

The writer's process (the controller, where the researcher's module runs) never holds the key:
this process generates it, or reads the operator's key file, after marking itself non-dumpable,
so no process of the same user can read its memory or environment (``/proc/<pid>/mem``,
``environ``, ``ptrace``). It signs only the two statements of its one run: a checkpoint
(``runId``, ``recordCount``, ``headDigest``) whose count is above every count it signed before,
and one completion (the same bytes again get the same signature). Anything else, another run's
statement included, is refused, so the writer's handle on it is no signing oracle.

On a cluster the signer of a run with the operator's key is a container of its own beside the
controller's (``--listen``): the key's Secret is mounted there only, and the controller reaches
it through a Unix socket on a volume the two containers share, one connection at a time or
several, each with the same protocol and the same one run's statements.

The protocol, over stdin and stdout (or each connection), in frames (``society_sandbox.framing``):
first this process answers with a status byte and a frame (``OK`` and the public key
``ed25519:<base64>``, or ``REFUSED`` and ``reason<NUL>message``); then each request is a frame of
the bytes to sign, each answer a status byte and a frame (the 64-byte signature, or the refusal).

Only the standard library, the wall's framing and ``cryptography`` (from the directory the writer
names) load here: the child starts with ``python -I -S`` and imports nothing of a researcher's
site-packages.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
from functools import partial
from typing import Any

if __name__ == "__main__":  # a script (python -I -S): the wall beside the ledger, for its framing
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from society_sandbox.framing import FrameError, framed, read_frame

OK = 0
REFUSED = 1
MAX_REQUEST = 4096
MAX_ANSWER = 64 * 1024
"""The longest answer a writer reads: a public key, a signature or a refusal."""
_PR_SET_DUMPABLE = 4
_CHECKPOINT = frozenset({"runId", "recordCount", "headDigest"})
_COMPLETION = frozenset(
    {"ledgerFormatVersion", "runId", "recordCount", "manifestSha256", "recordsSha256", "headDigest"}
)
_DIGEST = re.compile(r"[0-9a-f]{64}")


class Refusal(Exception):
    """A request this signer does not sign; ``reason`` names the rule."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RunStatements:
    """What one run's signer has signed so far, and whether it may sign ``data`` next."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.last_count = -1
        self.completion: bytes | None = None

    def admit(self, data: bytes) -> None:
        """Raise ``Refusal`` unless ``data`` is this run's next checkpoint or its completion."""
        statement = _canonical_object(data)
        keys = frozenset(statement)
        if statement.get("runId") != self.run_id:
            raise Refusal("other-run", f"this signer signs only run {self.run_id}")
        if not _DIGEST.fullmatch(str(statement.get("headDigest"))):
            raise Refusal("not-a-statement", "headDigest is not a SHA-256 hex digest")
        count = statement.get("recordCount")
        if type(count) is not int or count < 0:
            raise Refusal("not-a-statement", "recordCount is not a count")
        if self.completion is not None and data != self.completion:
            raise Refusal("completed", "the run's completion is signed; nothing else is")
        if keys == _CHECKPOINT:
            if count <= self.last_count:
                raise Refusal(
                    "count-not-increasing", f"a checkpoint at {self.last_count} is signed"
                )
            self.last_count = count
        elif keys == _COMPLETION:
            if count < self.last_count:
                raise Refusal(
                    "count-not-increasing", f"a checkpoint at {self.last_count} is signed"
                )
            self.completion = data
        else:
            raise Refusal("not-a-statement", "neither a checkpoint nor a completion")


def _canonical_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refusal("not-a-statement", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Refusal("not-a-statement", "not a JSON object")
    spelled = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if spelled.encode("utf-8") != data:
        raise Refusal("not-a-statement", "not canonical JSON")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("duplicate key")
    return value


def answer(out: int, status: int, payload: bytes) -> None:
    view = memoryview(bytes([status]) + framed(payload))
    while view:
        view = view[os.write(out, view) :]


def _no_readers() -> None:
    """Refuse every same-user reader of this process's memory and environment."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")
"""The DER prefix of a bare PKCS#8 Ed25519 key (``openssl genpkey -algorithm ed25519``)."""


def _load_key(key_file: str | None) -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if key_file is None:
        return Ed25519PrivateKey.generate()
    try:
        with open(key_file, "rb") as handle:
            pem = handle.read()
        der = _bare_pkcs8(pem)
        if der is not None:
            return Ed25519PrivateKey.from_private_bytes(der[len(_PKCS8_ED25519) :])
        from cryptography.hazmat.primitives import serialization  # slow to import: rare forms

        key = serialization.load_pem_private_key(pem, password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise Refusal(
            "signing-key-unreadable",
            f"cannot load signing key {key_file}: {exc}; pass a PEM PKCS#8 Ed25519 private key",
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise Refusal("signing-key-unreadable", f"{key_file} is not an Ed25519 key")
    return key


def _bare_pkcs8(pem: bytes) -> bytes | None:
    """The DER of a one-block ``PRIVATE KEY`` PEM holding a bare Ed25519 key, else None."""
    import base64
    import binascii

    lines = pem.strip().splitlines()
    if len(lines) < 3 or lines[0] != b"-----BEGIN PRIVATE KEY-----":
        return None
    if lines[-1] != b"-----END PRIVATE KEY-----":
        return None
    try:
        der = base64.b64decode(b"".join(lines[1:-1]), validate=True)
    except binascii.Error:
        return None
    if len(der) != len(_PKCS8_ED25519) + 32 or not der.startswith(_PKCS8_ED25519):
        return None
    return der


def _public_text(key: Any) -> bytes:
    import base64

    return b"ed25519:" + base64.b64encode(key.public_key().public_bytes_raw())


def serve(
    key: Any, statements: RunStatements, requests: int, replies: int, lock: threading.Lock
) -> None:
    """Sign what ``statements`` admits until ``requests`` ends; ``lock`` (a listening signer's
    connections share one) is held from each admission to its signature."""
    read = partial(os.read, requests)
    while True:
        try:
            data = read_frame(read, limit=MAX_REQUEST)
        except FrameError as exc:
            if exc.reason == "frame-too-large":
                answer(replies, REFUSED, b"not-a-statement\0request too long")
            return
        if data is None:
            return
        with lock:
            try:
                statements.admit(data)
            except Refusal as refused:
                answer(replies, REFUSED, f"{refused.reason}\0{refused}".encode())
                continue
            signature = key.sign(data)
        answer(replies, OK, signature)


def _serve_connection(
    connection: Any, key: Any, statements: RunStatements, lock: threading.Lock
) -> None:
    """Greet ``connection`` with the public key, then sign what the run's statements admit
    until it closes."""
    fd = connection.fileno()
    try:
        answer(fd, OK, _public_text(key))
        serve(key, statements, fd, fd, lock)
    except OSError:
        return  # the writer went away mid-answer: its next connection starts afresh
    finally:
        connection.close()


def listen(socket_path: str, run_id: str, key_file: str) -> None:
    """Serve the operator's key for ``run_id`` on a Unix socket until this process is ended
    (a pod's signer container, beside the controller's; docs/security.md).

    Every connection is greeted with the public key (or the key's refusal, when the file is not
    a key) and then signs only what the run's one set of statements admits, whichever connection
    asks: a second connection is no second run.
    """
    import socket

    _no_readers()  # before the key exists in this process
    try:
        key, refusal = _load_key(key_file), b""
    except Refusal as refused:
        key, refusal = None, f"{refused.reason}\0{refused}".encode()
    statements, lock = RunStatements(run_id), threading.Lock()
    try:
        os.unlink(socket_path)
    except FileNotFoundError:
        pass
    os.umask(0o077)  # the socket is its user's only: the controller runs as the same user
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(16)
    while True:
        connection, _ = server.accept()
        if key is None:
            try:
                answer(connection.fileno(), REFUSED, refusal)
            except OSError:
                pass
            connection.close()
            continue
        threading.Thread(
            target=_serve_connection, args=(connection, key, statements, lock), daemon=True
        ).start()


def main() -> None:
    """``python -I -S signer_process.py WRITER_PID RUN_ID CRYPTO_DIR [KEY_FILE]``, or
    ``python signer_process.py --listen SOCKET RUN_ID KEY_FILE`` (``cryptography`` importable)."""
    if sys.argv[1:2] == ["--listen"]:
        listen(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parent, run_id, crypto_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    key_file = sys.argv[4] if len(sys.argv) > 4 else None
    _no_readers()  # before the key exists in this process
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sync_process import die_with  # type: ignore[import-not-found]  # the sibling, alone

    die_with(parent)
    sys.path[0] = crypto_dir
    try:
        key = _load_key(key_file)
    except Refusal as refused:
        answer(1, REFUSED, f"{refused.reason}\0{refused}".encode())
        return
    answer(1, OK, _public_text(key))
    serve(key, RunStatements(run_id), 0, 1, threading.Lock())
    os._exit(0)  # nothing to flush or clean up: its key ends with it, now


if __name__ == "__main__":
    main()
