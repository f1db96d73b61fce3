"""Progress on stderr: one line per phase, bars for counted steps (admission, start, readiness)
and, while the program runs, a status line read from the run's ledger as it is written.

On a terminal the open bars share one line that redraws in place, and each bar leaves a final
line when it closes; the program's status line refreshes in place (``rich``). Anywhere else only
the bars' final lines are written, and a status line every ``STATUS_EVERY_S``, so logs stay
readable. stdout is never written: it carries the run's one JSON result line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ledger.format import RECORDS
from ledger.terminal import terminal_safe

BAR_WIDTH = 20
CLEAR_LINE = "\r\033[K"
STATUS_EVERY_S = 5.0
"""How often a status line is written while the program runs, where stderr is no terminal."""
REFRESH_S = 0.25
"""How often the status reads the ledger's new records and redraws, on a terminal."""


class TerminalProgress:
    """Implements the kernel's ``Progress`` protocol for a human watching stderr."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        status_every_s: float = STATUS_EVERY_S,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty() if live is None else live
        self._bars: list[ProgressBar] = []
        self._drawn = False
        self._status: LiveStatus | None = None
        self._status_every_s = status_every_s

    def program_started(self, ledger_dir: Path) -> None:
        self.end_status()
        self._write(
            "watch it live: society serve (a page per run), or "
            f"society ledger follow {ledger_dir}\n"
        )
        self._status = LiveStatus(
            ledger_dir / RECORDS, self._stream, live=self._live, every_s=self._status_every_s
        )
        self._status.start()

    def end_status(self) -> None:
        """Stop the program's status line, leaving its last figures on a line of their own."""
        status, self._status = self._status, None
        if status is not None:
            status.stop()

    def phase(self, text: str) -> None:
        # a phase may carry what a module or an agent said: no escape sequence reaches the
        # terminal (terminal_safe), line by line
        if not text.startswith(KEEPS_STATUS):
            self.end_status()
        elif self._status is not None:
            self._status.say(text)
            return
        self._clear()
        self._write("\n".join(terminal_safe(line) for line in text.split("\n")) + "\n")
        self._redraw()

    def counter(self, label: str, total: int) -> ProgressBar:
        bar = ProgressBar(self, label, total)
        self._bars.append(bar)
        self._redraw()
        return bar

    def _closed(self, bar: ProgressBar) -> None:
        self._bars.remove(bar)
        self._clear()
        self._write(f"{bar.render()}\n")
        self._redraw()

    def _clear(self) -> None:
        if self._drawn:
            self._write(CLEAR_LINE)
            self._drawn = False

    def _redraw(self) -> None:
        if self._live and self._bars:
            self._write(CLEAR_LINE + "  ".join(bar.render() for bar in self._bars))
            self._drawn = True

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


KEEPS_STATUS = ("SIGINT", "SIGTERM")
"""Phases said while the program still runs (an interrupt's notice): the status line stays."""


@dataclass
class RunFigures:
    """What the program's status line shows, counted from the ledger's records."""

    started: float = field(default_factory=time.monotonic)
    messages: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    model_calls: int = 0
    tokens: int = 0
    agents_ended: int = 0
    events: int = 0

    def take(self, record: dict[str, Any]) -> None:
        event = record.get("event")
        if not isinstance(event, dict):
            return
        self.events += 1
        tag = event.get("tag")
        if tag == "society.router-message-committed/v1":
            self.messages += 1
        elif tag == "society.link-message-dropped/v1":
            self.dropped[str(event.get("reason"))] += 1
        elif tag == "society.agent-model-usage/v1":
            self.model_calls += 1
            for name in ("promptTokens", "completionTokens"):
                tokens = event.get(name)
                self.tokens += tokens if isinstance(tokens, int) else 0
        elif tag in AGENT_ENDINGS:
            self.agents_ended += 1

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        parts = [f"program {elapsed:,.0f} s", f"{self.messages:,} messages"]
        if self.dropped:
            reasons = ", ".join(f"{count} {reason}" for reason, count in self.dropped.most_common())
            parts.append(f"{sum(self.dropped.values()):,} dropped ({reasons})")
        if self.model_calls:
            parts.append(f"{self.model_calls:,} model calls, {self.tokens:,} tokens")
        if self.agents_ended:
            parts.append(f"{self.agents_ended} agent{'s' * (self.agents_ended != 1)} ended")
        return terminal_safe(" · ".join(parts))


AGENT_ENDINGS = frozenset(
    {
        "society.agent-runtime-completed/v1",
        "society.agent-runtime-failed/v1",
        "society.agent-process-exited/v1",
        "society.agent-process-signaled/v1",
    }
)


class LiveStatus:
    """The program's status line, from the ledger's records file as the writer makes it durable
    (read only: a thread follows the file, so the run's event loop never waits for it)."""

    def __init__(self, records: Path, stream: TextIO, *, live: bool, every_s: float) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self.figures = RunFigures()
        self._records = records
        self._offset = 0
        self._partial = b""
        self._stream = stream
        self._live_tty = live
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="run-status", daemon=True)
        self._text = Text
        self._live: Any = None
        if live:
            console = Console(file=stream, force_terminal=True, highlight=False)
            self._live = Live(
                Text(self.figures.line()), console=console, auto_refresh=False, transient=True
            )
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._live is not None:
            self._live.start()
        self._thread.start()

    def say(self, text: str) -> None:
        """A line above the status line (an interrupt's notice)."""
        shown = "\n".join(terminal_safe(line) for line in text.split("\n"))
        with self._lock:
            if self._live is not None:
                self._live.console.print(self._text(shown))
            else:
                self._stream.write(shown + "\n")
                self._stream.flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * REFRESH_S + 1)
        self._read()
        with self._lock:
            if self._live is not None:
                self._live.stop()
            self._stream.write(self.figures.line() + "\n")
            self._stream.flush()

    def _follow(self) -> None:
        last_line = time.monotonic()
        while not self._stop.wait(REFRESH_S):
            self._read()
            with self._lock:
                if self._stop.is_set():
                    return
                if self._live is not None:
                    self._live.update(self._text(self.figures.line()), refresh=True)
                elif time.monotonic() - last_line >= self._every_s:
                    last_line = time.monotonic()
                    self._stream.write(self.figures.line() + "\n")
                    self._stream.flush()

    def _read(self) -> None:
        try:
            with open(self._records, "rb") as records:
                records.seek(self._offset)
                data = records.read()
        except OSError:
            return
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.figures.take(record)


class ProgressBar:
    """A count towards ``total``: ``advance`` moves it, ``close`` settles it (once)."""

    def __init__(self, owner: TerminalProgress, label: str, total: int) -> None:
        self._owner = owner
        self.label = label
        self.total = max(total, 0)
        self.count = 0
        self.closed = False

    def advance(self, n: int = 1) -> None:
        if not self.closed:
            self.count += n
            self._owner._redraw()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._owner._closed(self)

    def render(self) -> str:
        shown = min(self.count, self.total)
        filled = BAR_WIDTH if not self.total else BAR_WIDTH * shown // self.total
        return (
            f"{self.label} [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {self.count}/{self.total}"
        )
