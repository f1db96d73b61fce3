"""Helpers for the lifecycle tests: the ``society`` command as a child process, and /proc."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent / "programs"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LineReader:
    """Lines from a pipe, waiting on the file descriptor itself.

    Selecting on a pipe and then calling a buffered ``readline()`` loses lines: the buffered
    reader takes every line that arrived in one chunk, and the next ``select()`` waits for bytes
    the pipe no longer holds. This reader keeps its own buffer and selects only when it is empty.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""
        self.ended = False

    def next_line(self, timeout_s: float) -> bytes | None:
        """The next whole line, or None if none came within ``timeout_s`` or the pipe ended."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            if self.ended:
                return None
            with selectors.DefaultSelector() as selector:
                selector.register(self.fd, selectors.EVENT_READ)
                if not selector.select(max(deadline - time.monotonic(), 0.01)):
                    return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.ended = True
                if self.pending:  # a last line without its newline
                    line, self.pending = self.pending, b""
                    return line
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line + b"\n"


@dataclass
class Society:
    """A running ``society`` command: its output so far, and ways to signal and await it."""

    process: subprocess.Popen[bytes]
    stderr_lines: list[str] = field(default_factory=list)
    stdout_text: str = ""
    _stderr: LineReader | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for_stderr(self, fragment: str, timeout_s: float = 180) -> None:
        """Read stderr until a line contains ``fragment``."""
        deadline = time.monotonic() + timeout_s
        while not any(fragment in line for line in self.stderr_lines):
            if time.monotonic() > deadline or not self._read(deadline - time.monotonic()):
                raise AssertionError(
                    f"{fragment!r} never appeared on stderr:\n" + "\n".join(self.stderr_lines)
                )

    def _read(self, timeout_s: float) -> bool:
        """Take the next stderr line if one comes within ``timeout_s``; False once stderr ends."""
        assert self.process.stderr is not None
        if self._stderr is None:
            self._stderr = LineReader(self.process.stderr.fileno())
        line = self._stderr.next_line(timeout_s)
        if line is None:
            return not self._stderr.ended
        self.stderr_lines.append(line.decode(errors="replace").rstrip("\n"))
        return True

    def interrupt(self, signum: int = signal.SIGINT) -> None:
        """Signal the process group, as a terminal's Ctrl-C does."""
        os.killpg(self.pid, signum)

    def finish(self, timeout_s: float = 240) -> int:
        """Its exit status; one that does not end within ``timeout_s`` is killed, and the
        AssertionError shows its stderr (the last phase says where it hung)."""
        try:
            out, err = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self._take(*self.process.communicate())
            raise AssertionError(
                f"`society` did not end within {timeout_s:.0f}s; its stderr:\n{self.stderr}"
            ) from None
        self._take(out, err)
        return self.process.returncode

    def _take(self, out: bytes, err: bytes) -> None:
        self.stdout_text = out.decode()
        pending = self._stderr.pending if self._stderr is not None else b""
        self.stderr_lines.extend((pending + err).decode(errors="replace").splitlines())

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    def result(self) -> dict[str, object]:
        lines = self.stdout_text.splitlines()
        assert len(lines) == 1, f"expected one JSON line on stdout, got {lines!r}\n{self.stderr}"
        document = json.loads(lines[0])
        assert isinstance(document, dict)
        return document


@dataclass
class SocietyCommand:
    """Starts ``society`` with a given environment and artifact root."""

    artifacts: Path
    env: dict[str, str]
    started: list[Society] = field(default_factory=list)

    def start(self, *args: str | Path) -> Society:
        process = subprocess.Popen(
            [*SOCIETY, *map(str, args)],
            cwd=self.artifacts.parent,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        society = Society(process)
        self.started.append(society)
        return society

    def __call__(self, *args: str | Path, timeout_s: float = 240) -> Society:
        society = self.start(*args)
        society.finish(timeout_s)
        return society

    def run(self, module: str | Path, *args: str) -> Society:
        return self.start("run", module, "--artifacts", self.artifacts, *args)


def processes_naming(text: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
