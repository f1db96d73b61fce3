"""The control plane's child processes: spawning with logs, ports, liveness, readiness probes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cp_build import ControlPlaneError

KUBECONFIG_NAME = "admin.kubeconfig"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # If the test process dies, its control plane dies with it (Linux only).
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ControlPlaneError(
                "component-exited",
                f"{self.name} exited with status {code}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}",
            )


class ProcessGroup:
    """One control plane's components, run in `workdir`, each logging to logs/<name>.log."""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.components: list[Component] = []
        self.ports: dict[str, int] = {}

    def path(self, name: str) -> Path:
        assert self.workdir is not None, "control plane not started"
        return self.workdir / name

    def log_path(self, component: str) -> Path:
        return self.path("logs") / f"{component}.log"

    def port(self, name: str) -> int:
        """Reserve a free loopback port for `name`."""
        self.ports[name] = free_port()
        return self.ports[name]

    def spawn(self, name: str, argv: Sequence[str | os.PathLike[str]]) -> Component:
        log_path = self.log_path(name)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [str(arg) for arg in argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**os.environ, "KUBECONFIG": str(self.path(KUBECONFIG_NAME))},
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        component = Component(name, process, log_path)
        self.components.append(component)
        return component

    def stop(self) -> None:
        """Stop every component spawned, newest first, by pid."""
        while self.components:
            component = self.components.pop()
            process = component.process
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)


def wait_until(
    what: str, probe: Callable[[], Any], timeout: float, component: Component | None = None
) -> Any:
    """Poll `probe` until it returns a truthy value and return that; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        if component is not None:
            component.check_alive()
        try:
            value = probe()
            if value:
                return value
        except ControlPlaneError:
            raise
        except Exception as exc:  # any probe failure means "not yet"
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            tail = ""
            if component is not None:
                tail = f"\nlast lines of {component.log_path}:\n{component.log_tail()}"
            raise ControlPlaneError(
                "not-ready", f"timed out after {timeout:.0f}s waiting for {what}{detail}{tail}"
            )
        time.sleep(0.25)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


def insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def tcp_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0
