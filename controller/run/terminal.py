"""Progress on stderr: one line per phase, and bars for counted steps (admission, start, readiness).

On a terminal the open bars share one line that redraws in place, and each bar leaves a final
line when it closes; anywhere else only those final lines are written, so logs stay readable.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ledger.terminal import terminal_safe

BAR_WIDTH = 20
CLEAR_LINE = "\r\033[K"


class TerminalProgress:
    """Implements the kernel's ``Progress`` protocol for a human watching stderr."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty() if live is None else live
        self._bars: list[ProgressBar] = []
        self._drawn = False

    def phase(self, text: str) -> None:
        # a phase may carry what a module or an agent said: no escape sequence reaches the
        # terminal (terminal_safe), line by line
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
