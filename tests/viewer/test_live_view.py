"""``society serve`` for real: a live run's page in Chromium shows a new message soon after it
commits, then becomes the replay page; a bad token gets 403; serving never writes to a run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from viewer_support import ROOT, SOCIETY

from controller.viewer.server import MAX_LIVE_STREAMS

SLOW_TICKS = Path(__file__).resolve().parent / "programs" / "slow_ticks.py"
NEW_MESSAGE_BOUND_S = 5.0
"""How soon after its commit a message must show on the live page (a generous bound)."""
COMMITTED = "society.router-message-committed/v1"


class Server:
    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen(
            [*SOCIETY, "serve", "--artifacts", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.process.stderr
        self.base, self.token = self.url.split("/?token=")

    def get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        query = "" if token == "" else f"{'&' if '?' in path else '?'}token={token or self.token}"
        try:
            with urllib.request.urlopen(self.base + path + query, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def live_root(tmp_path: Path) -> Iterator[tuple[Path, Server]]:
    root = tmp_path / "artifacts"
    root.mkdir()
    server = Server(root)
    yield root, server
    server.stop()


def _committed(records: Path) -> list[int]:
    try:
        lines = records.read_bytes().splitlines()
    except OSError:
        return []
    rows = [json.loads(line) for line in lines if line.endswith(b"}")]
    return [row["logicalSequence"] for row in rows if row["event"]["tag"] == COMMITTED]


def test_a_live_run_page_shows_a_new_message_soon_after_it_commits(
    browser: Any, live_root: tuple[Path, Server], tmp_path: Path
) -> None:
    root, server = live_root
    run = subprocess.Popen(
        [*SOCIETY, "run", str(SLOW_TICKS), "--artifacts", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        records: Path | None = None
        while records is None or len(_committed(records)) < 2:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the run committed no messages within 120 s"
            found = list(root.glob("sr-*/ledger/main/records.ndjson"))
            records = found[0] if found else None
            time.sleep(0.1)
        run_id = records.parents[2].name
        status, body = server.get(f"/runs/{run_id}.json")
        snapshot = json.loads(body)
        assert status == 200 and snapshot["state"] == "running"
        assert snapshot["roster"] == {"echo": "ready"}
        assert snapshot["counts"]["messagesCommitted"] >= 2

        page = browser.new_page(viewport={"width": 1300, "height": 800})
        page.goto(server.url)
        page.click(f'a:has-text("{run_id}")')
        page.wait_for_selector('#verification[data-status="live"]')
        shown = page.evaluate("window.societyReplay.rows()")
        before = set(_committed(records))
        while not (new := sorted(set(_committed(records)) - before)):
            time.sleep(0.01)
        committed_at = time.monotonic()
        sequence = new[0]
        assert sequence >= shown  # committed after the page loaded: it came live
        in_view = """seq => {
            const row = document.querySelector(`.row[data-seq="${seq}"]`);
            if (!row) return false;
            const r = row.getBoundingClientRect();
            const v = document.getElementById("viewport").getBoundingClientRect();
            return r.top >= v.top && r.top < v.bottom;  // drawn where the reader looks
        }"""
        page.wait_for_function(in_view, arg=sequence, timeout=NEW_MESSAGE_BOUND_S * 1000)
        seen_after = time.monotonic() - committed_at
        assert seen_after < NEW_MESSAGE_BOUND_S
        assert "tick" in page.locator(f'.row[data-seq="{sequence}"]').inner_text()
        page.screenshot(path=str(tmp_path / "live.png"))

        assert run.wait(timeout=120) == 0
        page.wait_for_selector('#verification[data-status="self"]', timeout=30_000)
        assert page.locator("#outcome").inner_text() == "program succeeded"
        page.screenshot(path=str(tmp_path / "live-finished.png"))
        page.close()
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(timeout=60)


def test_a_missing_or_wrong_token_gets_403(
    browser: Any, live_root: tuple[Path, Server], partition_run: Path
) -> None:
    _, server = live_root
    run_id = partition_run.name
    for path in ("/", f"/runs/{run_id}", f"/runs/{run_id}.json", f"/runs/{run_id}/events"):
        assert server.get(path, token="")[0] == 403
        assert server.get(path, token="not-the-token")[0] == 403
    page = browser.new_page()
    last = "y" if server.token.endswith("x") else "x"  # a token ending in x stays one wrong
    response = page.goto(server.base + "/?token=" + server.token[:-1] + last)
    assert response is not None and response.status == 403
    assert page.goto(server.url).status == 200
    page.close()


def _digests(directory: Path) -> dict[str, tuple[str, float]]:
    return {
        str(path.relative_to(directory)): (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_mtime,
        )
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_serving_a_run_never_writes_to_it(partition_run: Path) -> None:
    before = _digests(partition_run)
    server = Server(partition_run.parent)
    try:
        run_id = partition_run.name
        assert server.get("/")[0] == 200
        status, page = server.get(f"/runs/{run_id}")
        assert status == 200 and b'id="ledger-data"' in page and b'"live":null' in page
        status, body = server.get(f"/runs/{run_id}.json")
        assert status == 200 and json.loads(body)["counts"]["drops"] == 6
        status, stream = server.get(f"/runs/{run_id}/events?from=0")
        assert status == 200 and stream.rstrip().endswith(b"event: complete\ndata: {}")
        assert server.get("/runs/sr-00000000000000000000000000000000")[0] == 404
        assert server.get("/runs/..%2F..%2Fetc")[0] == 404
    finally:
        server.stop()
    assert _digests(partition_run) == before


def _switches(pid: int) -> dict[str, int]:
    """Each thread's (but the event loop's) voluntary context switches so far."""
    counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        if tid == str(pid):
            continue  # the event loop's own thread ticks by design
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended
        [line] = [x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches:")]
        counts[tid] = int(line.split()[1])
    return counts


def _polling_threads(pid: int, over_s: float = 2.0) -> int:
    """Threads that woke more than a few times in ``over_s`` (an idle worker thread sleeps)."""
    before = _switches(pid)
    time.sleep(over_s)
    after = _switches(pid)
    return sum(1 for tid, n in after.items() if n - before.get(tid, 0) > 4)


def _open_stream(server: Server, run_id: str) -> tuple[socket.socket, bytes]:
    """A live-event stream of ``run_id`` and what it sent up to its first event (so it has
    started)."""
    host, port = server.base.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)), timeout=30)
    client.sendall(
        f"GET /runs/{run_id}/events?from=0&token={server.token} HTTP/1.1\r\n"
        f"host: {host}\r\n\r\n".encode()
    )
    seen = b""
    while b"\n\n" not in seen.partition(b"\r\n\r\n")[2]:
        chunk = client.recv(65536)
        assert chunk, seen
        seen += chunk
    return client, seen


def test_closed_live_streams_of_an_abandoned_run_leave_no_thread_and_streams_are_capped(
    partition_run: Path, tmp_path: Path
) -> None:
    root = tmp_path / "artifacts"
    abandoned = root / partition_run.name
    shutil.copytree(partition_run, abandoned)
    (abandoned / "result.json").unlink()  # its controller died: no result, no completion
    (abandoned / "ledger" / "main" / "completion.json").unlink()
    server = Server(root)
    try:
        assert server.get("/")[0] == 200
        streams = [_open_stream(server, abandoned.name)[0] for _ in range(MAX_LIVE_STREAMS)]
        assert _polling_threads(server.process.pid) >= MAX_LIVE_STREAMS  # each follows its ledger
        one_more, said = _open_stream(server, abandoned.name)
        assert b"event: failed" in said and b"too-many-streams" in said  # past the cap
        one_more.close()
        for stream in streams:
            stream.close()  # as a browser does when its tab closes
        time.sleep(0.5)
        assert _polling_threads(server.process.pid) == 0  # before: one per closed stream
        again, said = _open_stream(server, abandoned.name)  # the count went back down too
        assert b"event: record" in said
        again.close()
    finally:
        server.stop()
