"""The replay page of a real run, opened from disk in Chromium: lanes, a dropped message, the
verification badge, filters and search; self-contained; and a tampered ledger says so."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
from viewer_support import ROOT, society

from controller.events import core_events
from controller.events.run import RunStarted
from controller.modelgateway.events import AgentModelUsage, model_gateway_catalog
from ledger import EventCatalog, Provenance, open_ledger_writer
from ledger.format import RECORDS


def _write_page(run_dir: Path, output: Path) -> dict[str, Any]:
    result = society("view", str(run_dir), "-o", str(output))
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 860})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    page.wait_for_selector("#verification[data-status]")
    assert errors == []
    return page, requests


def _show_only(page: Any, tag: str) -> None:
    page.click("text=event types")
    for box in page.locator("#type-filter input").all():
        if (box.get_attribute("data-tag") == tag) != box.is_checked():
            box.click()
    page.click("text=event types")


def test_the_replay_page_shows_lanes_a_dropped_message_and_the_verification_badge(
    browser: Any, partition_run: Path, tmp_path: Path
) -> None:
    output = tmp_path / "replay.html"
    written = _write_page(partition_run, output)
    assert written["verification"] == "self"
    page, requests = _open(browser, output)
    lanes = page.locator(".lane-head").evaluate_all("heads => heads.map(h => h.dataset.lane)")
    assert set(lanes) == {"agent:ann", "agent:ben", "agent:cat", "endpoint:workload"}
    badge = page.locator("#verification")
    assert badge.get_attribute("data-status") == "self"
    assert "verified" in badge.inner_text()
    assert page.locator("#outcome").inner_text() == "program succeeded"
    assert page.locator("#readiness").inner_text().startswith("passed at +")
    assert page.locator('#usage tr[data-agent="ann"]').inner_text().endswith("no model use")
    page.screenshot(path=str(tmp_path / "replay.png"))
    if os.environ.get("SOCIETY_UPDATE_DOCS"):  # refresh the README's picture on purpose only
        down = page.evaluate("window.societyReplay.firstOf('society.link-down/v1')")
        page.evaluate(f"window.societyReplay.reveal({down - 6})")
        page.screenshot(path=str(ROOT / "docs" / "replay.png"))

    _show_only(page, "society.link-message-dropped/v1")
    dropped = page.locator(".row.dropped")
    assert dropped.count() == 6  # ann <-> ben during ticks 4-6, both directions
    assert "link-down" in dropped.first.inner_text()
    assert "agent:ann" in dropped.first.inner_text() and "agent:ben" in dropped.first.inner_text()
    _show_only(page, "society.router-message-committed/v1")
    page.fill("#search", "ben saw tick 5")
    page.wait_for_function("() => window.societyReplay.visible() === 1")
    arrow = page.locator(".row").first.inner_text()
    assert "DROPPED (link-down)" in arrow and "agent:cat" in arrow
    page.screenshot(path=str(tmp_path / "replay-dropped.png"))
    assert [url for url in requests if not url.startswith("file://")] == []
    page.close()


def test_the_page_is_one_self_contained_file_within_twice_the_ledger(
    partition_run: Path, tmp_path: Path
) -> None:
    output = tmp_path / "replay.html"
    _write_page(partition_run, output)
    html = output.read_text()
    for reference in ("src=", "href=", "@import", "url(", "http://", "https://"):
        assert reference not in html.replace("http-equiv", "")
    ledger = partition_run / "ledger" / "main"
    assert output.stat().st_size <= 2 * sum(f.stat().st_size for f in ledger.iterdir())


def test_a_tampered_ledger_shows_failed_with_its_reason(
    browser: Any, run_copy: Path, tmp_path: Path
) -> None:
    records = run_copy / "ledger" / "main" / RECORDS
    records.write_text(records.read_text().replace("tick 2", "tick 9", 1))
    output = tmp_path / "replay.html"
    written = _write_page(run_copy, output)
    assert written["verification"] == "failed"
    page, _ = _open(browser, output)
    assert page.locator("#verification").get_attribute("data-status") == "failed"
    assert "chain-broken" in page.locator("#verification-reasons").inner_text()
    assert page.evaluate("window.societyReplay.rows()") > 0  # shown as found, marked unverified
    page.screenshot(path=str(tmp_path / "replay-failed.png"))
    page.close()


def test_usage_and_cost_per_agent_show_unknown_cost_as_unknown(
    browser: Any, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger" / "main"
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API holds this thread's loop
        thread.submit(anyio.run, _write_usage_ledger, ledger).result()
    output = tmp_path / "replay.html"
    assert _write_page(ledger, output)["verification"] == "self"
    page, _ = _open(browser, output)
    priced = page.locator('#usage tr[data-agent="ada"]').inner_text().split("\t")
    unpriced = page.locator('#usage tr[data-agent="bo"]').inner_text().split("\t")
    assert priced[2:] == ["2", "110", "0.003000"]
    assert unpriced[2:] == ["1", "unknown", "unknown"]
    page.close()


async def _write_usage_ledger(directory: Path) -> None:
    catalog = EventCatalog.merge(core_events, model_gateway_catalog)
    async with open_ledger_writer(
        directory,
        catalog=catalog,
        definition_id="tests.usage/v1",
        run_id="sr-" + "0" * 31 + "2",
        provenance=Provenance.current("local"),
    ) as writer:
        start = RunStarted(
            definition_id="tests.usage/v1",
            profile="local",
            seed=1,
            roster=["ada", "bo"],
            runtimes={"ada": "llm", "bo": "llm"},
        )
        await writer.append(start, producer="kernel")
        for agent, prompt, cost in (("ada", 50, 0.001), ("ada", 40, 0.002), ("bo", None, None)):
            usage = AgentModelUsage(
                agent=agent,
                provider="local",
                model="m",
                prompt_tokens=prompt,
                completion_tokens=None if prompt is None else 10,
                latency_ms=5.0,
                cost_usd=cost,
                attempts=1,
            )
            await writer.append(usage, producer="gateway")
        await writer.complete()


def test_the_agent_filter_hides_rows_of_unchecked_agents(
    browser: Any, partition_run: Path, tmp_path: Path
) -> None:
    output = tmp_path / "replay.html"
    _write_page(partition_run, output)
    page, _ = _open(browser, output)
    everything = page.evaluate("window.societyReplay.visible()")
    page.click("text=agents & endpoints")
    for lane in ("agent:ann", "agent:ben", "agent:cat"):
        page.locator(f'#agent-filter label:has-text("{lane}") input').uncheck()
    only_workload = page.evaluate("window.societyReplay.visible()")
    assert 0 < only_workload < everything
    texts = page.locator(".row .text").all_inner_texts()
    assert not any(text.startswith("dropped") for text in texts)  # ann <-> ben only
    page.close()


def test_a_lone_surrogate_escape_in_a_failed_ledger_gives_a_whole_page_not_a_traceback(
    browser: Any, run_copy: Path, tmp_path: Path
) -> None:
    ledger = run_copy / "ledger" / "main"
    records = ledger / RECORDS
    records.write_text(records.read_text().replace("tick 2", "tick \\ud800 \\udfff", 1))
    manifest = ledger / "manifest.json"
    manifest.write_text(
        manifest.read_text().replace('"definitionId":"', '"definitionId":"\\udc80', 1)
    )
    output = tmp_path / "replay.html"
    output.write_text("an older page")
    result = society("view", str(run_copy), "-o", str(output))
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    written = json.loads(result.stdout)
    assert (result.returncode, written["verification"]) == (1, "failed")
    html = output.read_bytes().decode("utf-8")  # whole, and UTF-8
    assert html.rstrip().endswith("</html>") and written["bytes"] == len(output.read_bytes())
    assert "tick \\ud800 \\udfff" in html  # the escape as the ledger holds it
    page, _ = _open(browser, output)
    assert page.locator("#verification").get_attribute("data-status") == "failed"
    assert page.evaluate("window.societyReplay.rows()") > 0
    assert page.locator("#definition").inner_text().startswith("\ufffd")
    page.close()
