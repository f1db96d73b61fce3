"""The replay page of a 100,000-record ledger in headless Chromium, next to a plain HTML file.

    .venv/bin/python benchmarks/replay_bench.py [--records 100000] [--repeat 3]

Writes a real signed ledger of a four-agent conversation (messages, deliveries, a partition with
drops), renders its page with `society view`'s code, and prints: the page's size against the
ledger's (goal: at most 2x); then, in Debian's Chromium driven by Playwright, the time from
navigation until the first rows of the timeline are painted, beside the time Chromium takes to
load and paint a plain HTML file of the same size (same run, same browser), and their ratio.
Goal: first paint within 3 s.
"""

from __future__ import annotations

import argparse
import html
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from controller.events import core_events
from controller.events.network import (
    ConversationOpened,
    LinkDown,
    LinkMessageDropped,
    LinkUp,
    RouterMessageCommitted,
    RouterMessagesDelivered,
)
from controller.events.run import ReadinessGatePassed, RunStarted
from controller.viewer.page import render_page
from controller.viewer.records import read_run
from ledger import Event, Provenance, open_ledger_writer

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
GOAL_S = 3.0
AGENTS = ["ann", "ben", "cat", "dan"]


def events(total: int) -> list[tuple[Event, str]]:
    out: list[tuple[Event, str]] = [
        (
            RunStarted(
                definition_id="bench.replay/v1",
                profile="local",
                seed=1,
                roster=AGENTS,
                runtimes=dict.fromkeys(AGENTS, "scripted"),
            ),
            "kernel",
        ),
        (ReadinessGatePassed(agents=AGENTS, elapsed_ms=1.0), "kernel"),
    ]
    ids = [f"agent:{name}" for name in AGENTS]
    out.append(
        (ConversationOpened(conversation_id="c-1", opened_by=ids[0], participants=ids), "router")
    )
    number = 0
    partitioned = False
    while len(out) < total:
        number += 1
        sender = ids[number % len(ids)]
        if number % 500 == 0:
            partitioned = not partitioned
            link = LinkDown if partitioned else LinkUp
            out.append((link(sender_id=ids[0], receiver_id=ids[1]), "links"))
        message = f"m-{number}"
        text = f"{sender.removeprefix('agent:')} says turn {number}: PROPOSE split 60/40"
        out.append(
            (
                RouterMessageCommitted(
                    conversation_id="c-1",
                    message_id=message,
                    sender_id=sender,
                    router_sequence=number,
                    parts=[text],
                ),
                "router",
            )
        )
        for receiver in ids:
            if receiver == sender:
                continue
            if partitioned and {sender, receiver} == {ids[0], ids[1]}:
                out.append(
                    (
                        LinkMessageDropped(
                            message_id=message,
                            sender_id=sender,
                            receiver_id=receiver,
                            reason="link-down",
                        ),
                        "router",
                    )
                )
            else:
                delivered = RouterMessagesDelivered(receiver_id=receiver, message_ids=[message])
                out.append((delivered, "router"))
    return out[:total]


async def write_ledger(directory: Path, total: int) -> None:
    async with open_ledger_writer(
        directory,
        catalog=core_events,
        definition_id="bench.replay/v1",
        run_id="sr-" + "0" * 31 + "1",
        provenance=Provenance.current("bench"),
        metadata={"seed": 1, "profile": "local"},
    ) as writer:
        batch = events(total - 3)  # the ledger adds checkpoints; close enough to `total`
        async with anyio.create_task_group() as group:
            lanes = 64
            for lane in range(lanes):

                async def append(first: int) -> None:
                    for event, producer in batch[first::lanes]:
                        await writer.append(event, producer=producer)

                group.start_soon(append, lane)
        await writer.complete()


def plain_page(size: int, source: Path) -> str:
    """A plain HTML page of ``size`` bytes: the ledger's text in a <pre>."""
    text = html.escape(source.read_text(encoding="utf-8"))
    head = "<!doctype html><meta charset=utf-8><title>plain</title><pre>"
    body = (text * (size // max(len(text), 1) + 1))[: size - len(head) - 6]
    return head + body + "</pre>"


def measure(page: object, url: str, ready: str) -> float:
    started = time.perf_counter()
    page.goto(url, wait_until="commit")  # type: ignore[attr-defined]
    page.wait_for_function(ready, timeout=120_000)  # type: ignore[attr-defined]
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # type: ignore[attr-defined]
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        ledger = root / "ledger" / "main"
        started = time.perf_counter()
        anyio.run(write_ledger, ledger, args.records)
        print(f"wrote a {args.records:,}-record ledger in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        page_text = render_page(read_run(ledger))
        render_s = time.perf_counter() - started
        replay = root / "replay.html"
        replay.write_text(page_text, encoding="utf-8")
        ledger_bytes = sum(path.stat().st_size for path in ledger.iterdir())
        page_bytes = replay.stat().st_size
        plain = root / "plain.html"
        plain.write_text(plain_page(page_bytes, ledger / "records.ndjson"), encoding="utf-8")
        ratio = page_bytes / ledger_bytes
        print(
            f"page {page_bytes / 1e6:.1f} MB for a {ledger_bytes / 1e6:.1f} MB ledger: "
            f"{ratio:.2f}x (goal <= 2x); verify + render in Python {render_s:.1f}s"
        )
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            rows_drawn = "() => document.querySelectorAll('#spacer .row').length > 0"
            loaded = "() => document.readyState === 'complete'"
            replay_s, plain_s = [], []
            for _ in range(args.repeat):
                plain_s.append(measure(page, plain.as_uri(), loaded))
                replay_s.append(measure(page, replay.as_uri(), rows_drawn))
            browser.close()
        replay_median, plain_median = statistics.median(replay_s), statistics.median(plain_s)
        print(
            f"first paint of the timeline: {replay_median:.2f}s (median of {args.repeat}); "
            f"plain HTML of the same size: {plain_median:.2f}s; ratio "
            f"{replay_median / plain_median:.2f}x; goal <= {GOAL_S:.0f}s: "
            f"{'met' if replay_median <= GOAL_S else 'NOT met'}"
        )
        return 0 if replay_median <= GOAL_S and ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
