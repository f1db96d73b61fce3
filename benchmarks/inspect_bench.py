"""An Inspect export of a 100,000-record ledger, and `inspect view`'s first paint of it, beside the
replay page of the same ledger.

    .venv/bin/python benchmarks/inspect_bench.py [--records 100000] [--repeat 3]

Writes the real signed ledger `replay_bench.py` writes (four agents in one conversation, a
partition with drops), then prints, same run, same ledger: the time `society ledger
export-inspect`'s code takes to verify it and write the `.eval` log, beside the time `society
view`'s code takes to verify it and render the replay page, and their ratio; then, in Debian's
Chromium driven by Playwright, the time from navigation until `inspect view` (serving that log)
shows its samples list, beside the time until the replay page paints its first timeline rows,
and their ratio (medians of --repeat).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import anyio
from replay_bench import ARGS, CHROMIUM, measure, write_ledger

from controller.viewer.inspect_log import export_inspect
from controller.viewer.page import render_page
from controller.viewer.records import read_run

INSPECT = Path(sys.executable).parent / "inspect"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(logs: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [str(INSPECT), "view", "--log-dir", str(logs), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return server, url
        except OSError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit("inspect view did not answer within 120 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        ledger = root / "ledger" / "main"
        anyio.run(write_ledger, ledger, args.records)
        started = time.perf_counter()
        import inspect_ai.log  # noqa: F401  (what the command pays once: timed on its own)

        import_s = time.perf_counter() - started
        started = time.perf_counter()
        (root / "replay.html").write_text(render_page(read_run(ledger)), encoding="utf-8")
        page_s = time.perf_counter() - started
        started = time.perf_counter()
        written = export_inspect(ledger, root / "logs" / "run.eval")
        export_s = time.perf_counter() - started
        size = (root / "logs" / "run.eval").stat().st_size
        print(
            f"{args.records:,} records: export-inspect (verify + write, {size / 1e6:.1f} MB, "
            f"{written['samples']} samples) {export_s:.1f}s; replay page (verify + render) "
            f"{page_s:.1f}s; ratio {export_s / page_s:.2f}x (importing inspect_ai: {import_s:.1f}s)"
        )
        server, url = serve(root / "logs")
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                samples = f"() => document.body.innerText.includes('{written['samples']} Samples')"
                rows = "() => document.querySelectorAll('#spacer .row').length > 0"
                view_s, replay_s = [], []
                for _ in range(args.repeat):
                    replay_s.append(measure(page, (root / "replay.html").as_uri(), rows))
                    view_s.append(measure(page, url, samples))
                browser.close()
        finally:
            server.terminate()
            server.wait(10)
        view, replay = statistics.median(view_s), statistics.median(replay_s)
        print(
            f"first paint: inspect view's samples list {view:.2f}s (median of {args.repeat}); "
            f"the replay page's timeline {replay:.2f}s; ratio {view / replay:.2f}x"
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
