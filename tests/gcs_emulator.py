"""fake-gcs-server, the GCS emulator that scripts/build-tools.sh builds, as a child process."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from controller.ops.checks.tools import ToolMissing, tool


class FakeGcsServer:
    """fake-gcs-server on ``host`` (127.0.0.1; the real node's host address, for its pods), its
    objects on disk so that it can be killed and restarted."""

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.root = root
        self.host = host
        with socket.socket() as probe:
            probe.bind((host, 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        try:
            binary = tool("fake-gcs-server")
        except ToolMissing as exc:
            pytest.fail(str(exc))
        log = (self.root.parent / "fake-gcs-server.log").open("ab")
        self.process = subprocess.Popen(
            [str(binary), "-scheme", "http", "-host", self.host, "-port", str(self.port),
             "-backend", "filesystem", "-filesystem-root", str(self.root),
             "-external-url", self.url, "-log-level", "error"],
            stdout=log, stderr=log,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"fake-gcs-server did not listen on {self.port} within 30 s")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
