"""The writer's side of the ledger's signer process (``ledger.signer_process``).

A ledger opened without a key object in hand signs through this handle: the private key lives
only in the signer process, which the writer's process (the researcher's module's process)
cannot read, and which signs only its run's checkpoints and completion.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Protocol

import cryptography

from ledger import signer_process
from ledger.errors import LedgerError
from society_sandbox.framing import FrameError, framed, read_exactly, read_frame

_SCRIPT = Path(signer_process.__file__)
_CRYPTOGRAPHY_DIR = str(Path(cryptography.__file__).resolve().parent.parent)
SOCKET_WAIT_S = 60.0
"""How long a writer waits for a listening signer's socket to appear."""


class Signer(Protocol):
    """What a writer signs with: a ``SigningKey`` in this process, a ``SignerProcess``, or a
    ``SignerSocket``."""

    @property
    def public_key(self) -> str: ...

    def sign(self, data: bytes) -> str: ...


class _SignerChannel:
    """The writer's end of the signer's protocol over a byte stream (``signer_process``)."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes], public_key: str) -> None:
        self._reader = reader
        self._writer = writer
        self._public_key = public_key
        self._lock = threading.Lock()

    @property
    def public_key(self) -> str:
        return self._public_key

    def wait_ready(self) -> None:
        """Wait for the signer's key (blocking); ``LedgerError`` (``signing-key-unreadable``)
        when the key file is not an Ed25519 PEM key, and the signer is closed."""
        try:
            self._public_key = self._reply("starting").decode("ascii")
        except BaseException:
            self.close()
            raise

    def sign(self, data: bytes) -> str:
        """The signature (base64) over ``data``; ``LedgerError`` when the signer refuses it."""
        request = framed(data)
        with self._lock:
            try:
                self._writer.write(request)
                self._writer.flush()
            except OSError as exc:
                raise self._lost(f"the request could not be sent ({exc})") from None
            return base64.b64encode(self._reply("signing")).decode("ascii")

    def close(self) -> None:
        raise NotImplementedError

    def _close_streams(self) -> None:
        for stream in (self._writer, self._reader):
            if not stream.closed:
                try:
                    stream.close()
                except OSError:
                    pass

    def _reply(self, doing: str) -> bytes:
        try:
            status = read_exactly(self._reader.read, 1)
            payload = read_frame(self._reader.read, limit=signer_process.MAX_ANSWER)
        except FrameError as exc:
            raise self._lost(f"its answer while {doing}: {exc.detail}") from None
        except OSError as exc:
            raise self._lost(f"reading its answer failed while {doing} ({exc})") from None
        if status is None or payload is None:
            raise self._lost(f"it ended while {doing}")
        if status[0] == signer_process.OK:
            return payload
        reason, _, message = payload.decode("utf-8", "replace").partition("\0")
        if reason == "signing-key-unreadable":
            raise LedgerError(message, reason=reason)
        raise LedgerError(
            f"the ledger's signer refused to sign ({reason}): {message}", reason="signature-refused"
        )

    def _lost(self, how: str) -> LedgerError:
        return LedgerError(
            f"the ledger's signer process is gone: {how}; the ledger keeps its signed prefix",
            reason="signer-lost",
        )


class SignerProcess(_SignerChannel):
    """A child process that holds one run's key; ``sign`` asks it, ``close`` ends it.

    Blocking: start it and close it off the event loop; ``sign`` is one round trip through two
    pipes (a writer signs once per checkpoint and once to complete; ``benchmarks/signer_bench.py``).
    """

    def __init__(self, process: subprocess.Popen[bytes], public_key: str) -> None:
        assert process.stdout is not None and process.stdin is not None
        super().__init__(process.stdout, process.stdin, public_key)
        self._process = process

    @classmethod
    def start(cls, run_id: str, key_file: str | Path | None = None) -> SignerProcess:
        """``spawn`` and ``wait_ready``: the signer of ``run_id``, ready to sign."""
        signer = cls.spawn(run_id, key_file)
        signer.wait_ready()
        return signer

    @classmethod
    def spawn(cls, run_id: str, key_file: str | Path | None = None) -> SignerProcess:
        """Start the signer of ``run_id`` with a fresh key, or the operator's ``key_file``.

        Call it from a thread that outlives the ledger (the event loop's): the signer dies with
        the thread that started it (``PR_SET_PDEATHSIG``), so it never outlives its writer.
        """
        command = [sys.executable, "-I", "-S", str(_SCRIPT), str(os.getpid()), run_id]
        command.append(_CRYPTOGRAPHY_DIR)
        if key_file is not None:
            command.append(str(Path(key_file).resolve()))
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches the writer, not it
        )
        return cls(process, "")

    @property
    def pid(self) -> int:
        return self._process.pid

    def close(self) -> None:
        """End the signer (idempotent): its key is gone with it."""
        self._close_streams()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class SignerSocket(_SignerChannel):
    """A connection to a run's listening signer (``signer_process --listen``): on a cluster, the
    signer container beside the controller's, which alone mounts the operator's key.

    Blocking, like ``SignerProcess``; ``close`` ends this connection, not the signer.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock.makefile("rb"), sock.makefile("wb"), "")
        self._sock = sock

    @classmethod
    def connect(cls, path: str | Path, *, timeout_s: float = SOCKET_WAIT_S) -> SignerSocket:
        """Connect to the signer at ``path``, waiting up to ``timeout_s`` for it to listen
        (its container may start after this one); then ``wait_ready`` for its key."""
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                break
            except OSError as exc:
                sock.close()
                if time.monotonic() >= deadline:
                    raise LedgerError(
                        f"no signer listens at {path} after {timeout_s:g} s ({exc}); the "
                        "controller's signer container may have failed: see its log",
                        reason="signer-lost",
                    ) from None
                time.sleep(0.1)
        signer = cls(sock)
        signer.wait_ready()
        return signer

    def close(self) -> None:
        self._close_streams()
        self._sock.close()
