"""The stderr renderer: bars redraw in place on a terminal, and become plain lines elsewhere."""

from __future__ import annotations

import io

from controller.run.terminal import CLEAR_LINE, TerminalProgress


def test_off_a_terminal_each_phase_and_each_closed_bar_is_one_plain_line() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream, live=False)
    progress.phase("admitting roster")
    started = progress.counter("agents started", 2)
    ready = progress.counter("agents ready", 2)
    started.advance()
    started.advance()
    ready.advance()
    started.close()
    ready.advance()
    ready.close()
    ready.close()
    assert stream.getvalue().splitlines() == [
        "admitting roster",
        "agents started [####################] 2/2",
        "agents ready [####################] 2/2",
    ]
    assert "\r" not in stream.getvalue()


def test_on_a_terminal_open_bars_share_one_redrawn_line_and_phases_print_above_it() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream, live=True)
    started = progress.counter("agents started", 4)
    started.advance()
    progress.phase("waiting for readiness")
    started.advance(3)
    started.close()
    text = stream.getvalue()
    assert text.startswith(CLEAR_LINE + "agents started [" + "-" * 20 + "] 0/4")
    assert CLEAR_LINE + "agents started [#####---------------] 1/4" in text
    assert CLEAR_LINE + "waiting for readiness\n" in text
    assert text.endswith(CLEAR_LINE + "agents started [####################] 4/4\n")
