"""``inspect view`` serves an exported log and Debian's Chromium (driven by Playwright) shows its
samples list, each agent's score from the grader in its row and the metrics in the header: the
log is one Inspect's own viewer opens, not only one its reader parses."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from forks_support import EXAMPLES, ROOT, Society

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
INSPECT = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "inspect"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_serving(url: str, server: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, "inspect view exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"inspect view did not answer {url} within {timeout_s} s")


def test_inspect_view_shows_the_samples_of_an_exported_run_with_each_agents_score(
    society: Society, hello_run: Path
) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-browser.sh (Debian's chromium)")
    logs = society.artifacts.parent / "logs"
    grader = EXAMPLES / "graders" / "hello.py"
    spoke = society("grade", grader, hello_run).line()["spoke"]
    exported = society(
        "ledger", "export-inspect", hello_run, "-o", logs / "hello.eval", "--grader", grader
    )
    assert exported.code == 0, exported.stderr
    port = free_port()
    server = subprocess.Popen(
        [str(INSPECT), "view", "--log-dir", str(logs), "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_serving(url, server)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            page.goto(url)
            page.get_by_text("2 Samples", exact=True).wait_for(timeout=60_000)
            shown = page.inner_text("body")
            table = [  # the samples list's rows (the metrics table's read empty)
                [
                    text.strip().lower()
                    for text in row.get_by_role("columnheader").all_inner_texts()
                    or row.get_by_role("gridcell").all_inner_texts()
                ]
                for row in page.get_by_role("row").all()
            ]
            browser.close()
    finally:
        server.terminate()
        server.wait(10)
    assert "society/acme.hello/v1" in shown
    assert "agent ann (scripted) in acme.hello/v1" in shown
    assert "agent ben (scripted) in acme.hello/v1" in shown
    # the samples list's score column (its last) shows each agent's own number, not "-"
    at = next(i for i, row in enumerate(table) if row[:1] == [""] and "id" in row)
    header, samples = table[at], table[at + 1 :]
    scores = {row[header.index("id")]: row[-1] for row in samples}
    assert header[-1] == "score", header
    assert scores == {name: str(spoke[f"agent:{name}"]) for name in ("ann", "ben")}
    # results.scores in the header: the mean of each agent's "spoke"
    assert spoke["agent:ann"] == spoke["agent:ben"] == 1 and "spoke\t1.0\t0.0" in shown
