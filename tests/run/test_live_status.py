"""While the program runs, ``society run`` shows it: a status line read from the run's ledger as
it is written (elapsed, messages, drops by reason, model calls and tokens, agents ended), where to
watch it live, and on Ctrl-C what it waits for and how long. stdout keeps its one JSON line."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.run.terminal import RunFigures

SOCIETY = (sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())")

MODULE = """
import anyio

from controller import RunSpec, scripted


async def execute(ctx):
    ann = ctx.agents.ann.agent
    async with ctx.network.endpoint("workload") as workload:
        conversation = await workload.open(ann)
        for number in range(TICKS):
            await conversation.send(f"tick {number}")
            await anyio.sleep(0.5)
        async with ctx.network.links.disable(workload, ann):
            for number in range(3):
                await conversation.send(f"lost {number}")
            await anyio.sleep(SLEEP_AFTER)
    return "done"


run_spec = RunSpec.define(id="tests.live-status/v1", agents={"ann": scripted()}, execute=execute)
"""

STATUS = re.compile(r"program (\d+) s · (\d+) messages")


def _module(tmp_path: Path, *, ticks: int, sleep_after: float) -> Path:
    module = tmp_path / "live_module.py"
    source = MODULE.replace("TICKS", str(ticks)).replace("SLEEP_AFTER", str(sleep_after))
    module.write_text(source)
    return module


def test_a_log_gets_a_status_line_every_few_seconds_and_stdout_only_the_result(
    tmp_path: Path,
) -> None:
    module = _module(tmp_path, ticks=16, sleep_after=0.5)
    done = subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(tmp_path / "artifacts")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert json.loads(line)["value"] == "done"
    lines = done.stderr.splitlines()
    start = lines.index("running program")
    assert lines[start + 1].startswith("watch it live: society serve")
    assert "society ledger follow " in lines[start + 1]
    stop = lines.index("stopping agents")
    statuses = [STATUS.search(text) for text in lines[start + 2 : stop]]
    assert len(statuses) >= 2 and all(statuses), lines[start:stop]  # every 5 s, and the last
    counts = [int(match[2]) for match in statuses if match]
    assert counts == sorted(counts) and counts[-1] >= 16
    last = lines[stop - 1]
    assert "3 dropped (3 link-down)" in last, last
    assert "\x1b" not in done.stderr  # no terminal codes where there is no terminal


def test_on_a_terminal_the_line_refreshes_in_place_and_ctrl_c_says_what_it_waits_for(
    tmp_path: Path,
) -> None:
    module = _module(tmp_path, ticks=4, sleep_after=600)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*SOCIETY, "run", str(module), "--artifacts", str(tmp_path / "artifacts")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    try:
        seen += _read_until(leader, b"dropped (3 link-down)", timeout_s=180)
        os.killpg(process.pid, signal.SIGINT)
        seen += _read_until(leader, b"stopping agents", timeout_s=120)
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        seen += _drain(leader)
        os.close(leader)
    text = seen.decode(errors="replace")
    assert "\r\x1b[2Kprogram " in text  # the status line redrawn in place, not a line per refresh
    assert "SIGINT: stopping the run: the program gets up to 30 s to return" in text
    assert "send SIGINT again to stop at once" in text
    assert json.loads(out)["exit"] == "interrupted"


def test_the_figures_count_what_the_ledger_records() -> None:
    figures = RunFigures()
    for event in (
        {"tag": "society.router-message-committed/v1"},
        {"tag": "society.router-message-committed/v1"},
        {"tag": "society.link-message-dropped/v1", "reason": "link-down"},
        {"tag": "society.link-message-dropped/v1", "reason": "policy-error"},
        {"tag": "society.link-message-dropped/v1", "reason": "link-down"},
        {"tag": "society.agent-model-usage/v1", "promptTokens": 30, "completionTokens": 12},
        {"tag": "society.agent-model-usage/v1", "promptTokens": None, "completionTokens": 5},
        {"tag": "society.agent-runtime-completed/v1"},
    ):
        figures.take({"event": event})
    figures.take({"event": "not an event"})
    line = figures.line()
    assert "2 messages" in line
    assert "3 dropped (2 link-down, 1 policy-error)" in line
    assert "2 model calls, 47 tokens" in line
    assert "1 agent ended" in line


def test_a_hostile_drop_reason_reaches_the_terminal_escaped() -> None:
    figures = RunFigures()
    figures.take({"event": {"tag": "society.link-message-dropped/v1", "reason": "\x1b]0;pwn\x07"}})
    assert "\x1b" not in figures.line() and "\x07" not in figures.line()


def _read_until(fd: int, needle: bytes, timeout_s: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout_s
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} never appeared on the terminal:\n{seen!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"the terminal closed before {needle!r}:\n{seen!r}")
            seen += chunk
    return seen


def _drain(fd: int) -> bytes:
    seen = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return seen
