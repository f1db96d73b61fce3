"""``society serve``: the runs under an artifact root, live, on 127.0.0.1 behind a random token.

Every URL needs ``?token=`` with the token printed at start (anything else gets 403). A running
run's page embeds the records so far and follows the rest by server-sent events from the
ledger's live follower; a finished run's page is its replay page. Nothing here writes to a run.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from html import escape
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from controller.run.runid import check_run_id
from controller.viewer.page import render_page
from controller.viewer.records import LEDGER_GLOB, find_ledger, read_run
from ledger import LedgerError
from ledger.format import COMPLETION, RecordEnvelope
from ledger.tail import follow_ledger
from ledger.verification import verify_ledger

RUN_FILE, RESULT_FILE = "run.json", "result.json"
WAIT_FOR_LEDGER_S = 0.1
MAX_LIVE_STREAMS = 32
"""Live-event streams served at once (each holds a worker thread while it follows a ledger);
one more gets a ``failed`` event (``too-many-streams``) and ends."""
AGENT_STATES = {
    "society.agent-runtime-ready/v1": "ready",
    "society.agent-runtime-start-failed/v1": "start-failed",
    "society.agent-runtime-completed/v1": "completed",
    "society.agent-runtime-failed/v1": "failed",
}


class TokenGate:
    """403 for any request whose ``token`` query parameter is not the server's token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = Request(scope).query_params.get("token", "")
            if not secrets.compare_digest(given.encode(), self.token.encode()):
                response = PlainTextResponse(
                    "403: this URL needs the token `society serve` printed (?token=...)",
                    status_code=403,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(root: Path, token: str) -> ASGIApp:
    root = root.resolve()

    def run_dir(request: Request) -> Path:
        try:
            run_id = check_run_id(request.path_params["run_id"])
        except ValueError:
            raise LookupError("not a run id") from None
        directory = root / run_id
        if not directory.is_dir():
            raise LookupError(f"no run {run_id} under {root}")
        return directory

    async def runs_page(request: Request) -> Response:
        items = []
        for state in await anyio.to_thread.run_sync(list_runs, root):
            link = f"/runs/{state['runId']}?token={token}"
            items.append(
                f'<tr data-run="{escape(state["runId"])}" data-state="{escape(state["state"])}">'
                f'<td><a href="{escape(link)}">{escape(state["runId"])}</a></td>'
                f"<td>{escape(state['state'])}</td>"
                f"<td>{escape(str(state.get('module') or ''))}</td>"
                f"<td>{state['records']}</td></tr>"
            )
        body = "".join(items) or '<tr><td colspan="4">no runs yet</td></tr>'
        return HTMLResponse(
            "<!doctype html><meta charset=utf-8><title>society runs</title>"
            "<style>body{font:14px system-ui;margin:20px}td,th{padding:3px 10px;text-align:left}"
            "</style>"
            f"<h1>Runs under {escape(str(root))}</h1><table id=runs><tr><th>run</th><th>state</th>"
            f"<th>module</th><th>records</th></tr>{body}</table>"
        )

    async def run_page(request: Request) -> Response:
        try:
            directory = run_dir(request)
            run = await anyio.to_thread.run_sync(read_run, directory)
        except (LookupError, LedgerError) as exc:
            return PlainTextResponse(f"404: {exc}", status_code=404)
        live = None
        if run.verification["status"] == "incomplete":
            live = f"/runs/{directory.name}/events?token={token}"
        return HTMLResponse(render_page(run, live_events=live))

    async def run_json(request: Request) -> Response:
        try:
            directory = run_dir(request)
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return JSONResponse(await anyio.to_thread.run_sync(run_snapshot, directory))

    streams = LiveStreams(MAX_LIVE_STREAMS)

    async def run_events(request: Request) -> Response:
        try:
            directory = run_dir(request)
            skip = max(0, int(request.query_params.get("from", "0")))
        except (LookupError, ValueError) as exc:
            return PlainTextResponse(f"404: {exc}", status_code=404)
        return LiveEventStream(
            streams.follow(directory, skip),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    app = Starlette(
        routes=[
            Route("/", runs_page),
            Route("/runs/{run_id}.json", run_json),
            Route("/runs/{run_id}/events", run_events),
            Route("/runs/{run_id}", run_page),
        ]
    )
    return TokenGate(app, token)


class LiveEventStream(StreamingResponse):
    """A streaming response that ends when its client disconnects, even while it writes nothing.

    Under ASGI 2.4 Starlette notices a disconnect only when a write fails, and an abandoned run's
    stream writes nothing: its follower would poll for ever. This one also waits for the
    server's ``http.disconnect`` and then cancels the stream.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tasks:

            async def until_disconnected() -> None:
                await self.listen_for_disconnect(receive)
                tasks.cancel_scope.cancel()

            tasks.start_soon(until_disconnected)
            try:
                await self.stream_response(send)
            except OSError:
                pass  # the client went away while a record was written
            tasks.cancel_scope.cancel()


class LiveStreams:
    """The open live-event streams, at most ``most`` at once."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.open = 0

    async def follow(self, run_dir: Path, skip: int) -> AsyncIterator[str]:
        """``sse_records``, counted from its first event to its end, however it ends.

        Counted inside the stream, not at the request: a stream Starlette never starts (its
        client left at once) is never counted, so none can leak a count.
        """
        if self.open >= self.most:
            failure = {"reason": "too-many-streams", "detail": f"{self.most} streams are open"}
            yield f"event: failed\ndata: {json.dumps(failure)}\n\n"
            return
        self.open += 1
        try:
            async for event in sse_records(run_dir, skip):
                yield event
        finally:
            self.open -= 1


class _StreamClosed(Exception):
    """The client closed its stream: the thread following the ledger for it stops."""


def _sleep_until_closed(closed: threading.Event) -> Callable[[float], None]:
    """A ``sleep`` for the follower's polls that ends the follower once ``closed`` is set."""

    def sleep(seconds: float) -> None:
        if closed.wait(seconds):
            raise _StreamClosed

    return sleep


async def sse_records(run_dir: Path, skip: int) -> AsyncIterator[str]:
    """``record`` events for each durable record after the first ``skip``, then ``complete``
    (the finished ledger verified) or ``failed`` (with the reason).

    The follower's thread polls with a sleep that ends it once the stream closes (cancelled,
    closed or done), so a client that goes away leaves no thread polling an abandoned ledger.
    """
    closed = threading.Event()
    try:
        async for event in _sse_records(run_dir, skip, _sleep_until_closed(closed)):
            yield event
    finally:
        closed.set()


async def _sse_records(
    run_dir: Path, skip: int, sleep: Callable[[float], None]
) -> AsyncIterator[str]:
    try:
        directory = await anyio.to_thread.run_sync(
            _await_ledger, run_dir, sleep, abandon_on_cancel=True
        )
    except _StreamClosed:
        return
    records: Iterator[RecordEnvelope] = follow_ledger(directory, sleep=sleep)
    done = object()
    try:
        while True:
            envelope = await anyio.to_thread.run_sync(next, records, done, abandon_on_cancel=True)
            if envelope is done:
                break
            assert isinstance(envelope, RecordEnvelope)
            if envelope.logical_sequence < skip:
                continue
            wire = envelope.to_wire()
            event = dict(wire["event"])
            row = {
                "seq": wire["logicalSequence"],
                "us": int(wire["elapsedNanos"]) // 1000,
                "producer": wire["producer"],
                "tag": event.pop("tag", "?"),
                "event": event,
            }
            yield f"event: record\ndata: {json.dumps(row, separators=(',', ':'))}\n\n"
        await anyio.to_thread.run_sync(_verify_finished, directory, abandon_on_cancel=True)
    except LedgerError as exc:
        failure = {"reason": exc.reason, "detail": exc.detail}
        yield f"event: failed\ndata: {json.dumps(failure)}\n\n"
        return
    yield "event: complete\ndata: {}\n\n"


def _verify_finished(directory: Path) -> None:
    verify_ledger(None, directory, require_catalog=False)


def _await_ledger(run_dir: Path, sleep: Callable[[float], None]) -> Path:
    """The run's ledger directory, once the writer created it (polling: a run being prepared
    has none yet)."""
    while not any(run_dir.glob(LEDGER_GLOB)):
        sleep(WAIT_FOR_LEDGER_S)
    return find_ledger(run_dir)


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def run_state(run_dir: Path) -> dict[str, Any]:
    """A run's state from its files: finished (result written), complete, running, abandoned."""
    record, result = _json_file(run_dir / RUN_FILE), _json_file(run_dir / RESULT_FILE)
    ledgers = sorted(run_dir.glob(LEDGER_GLOB))
    complete = bool(ledgers) and (ledgers[0].parent / COMPLETION).exists()
    records = 0
    if ledgers:
        try:
            with (ledgers[0].parent / "records.ndjson").open("rb") as handle:
                records = sum(
                    chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b"")
                )
        except OSError:
            records = 0
    if result:
        state = "finished"
    elif complete:
        state = "complete"
    elif _alive(record.get("controllerPid")):
        state = "running"
    else:
        state = "abandoned" if ledgers else "starting"
    return {
        "runId": run_dir.name,
        "state": state,
        "module": record.get("module"),
        "records": records,
        "outcome": result.get("outcome"),
        "exit": result.get("exit"),
    }


def list_runs(root: Path) -> list[dict[str, Any]]:
    runs = []
    for entry in sorted(root.iterdir(), key=lambda path: path.stat().st_mtime, reverse=True):
        try:
            check_run_id(entry.name)
        except ValueError:
            continue
        if entry.is_dir():
            runs.append(run_state(entry))
    return runs


def run_snapshot(run_dir: Path) -> dict[str, Any]:
    """Status, roster snapshot and counts for ``/runs/<id>.json``."""
    snapshot = run_state(run_dir)
    try:
        run = read_run(run_dir)
    except LedgerError as exc:
        return {**snapshot, "verification": {"status": "none", "reason": exc.reason}}
    tags = run.records.tags
    counts: dict[str, int] = {}
    roster: dict[str, str] = {}
    deliveries = 0
    for row in run.records.rows:
        tag = tags[row[3]]
        counts[tag] = counts.get(tag, 0) + 1
        event = row[4]
        if tag == "society.router-messages-delivered/v1":
            deliveries += len(event.get("messageIds", []))
        elif tag == "society.router-message-delivered/v1":  # what older routers wrote
            deliveries += 1
        if tag == "society.run-started/v1":
            roster = {name: "admitted" for name in event.get("roster", [])}
        elif tag in AGENT_STATES and event.get("agent") in roster:
            roster[event["agent"]] = AGENT_STATES[tag]
    return {
        **snapshot,
        "definitionId": run.manifest.get("definitionId"),
        "verification": run.verification,
        "roster": roster,
        "counts": {
            "records": len(run.records.rows),
            "messagesCommitted": counts.get("society.router-message-committed/v1", 0),
            "deliveries": deliveries,
            "drops": counts.get("society.link-message-dropped/v1", 0),
            "byTag": dict(sorted(counts.items())),
        },
    }


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(root: Path, *, port: int = 0, host: str = "127.0.0.1") -> int:
    """Serve until interrupted; prints the URL with the token first."""
    import uvicorn

    token = secrets.token_urlsafe(24)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)  # connections wait in the backlog until uvicorn accepts them
    bound = listener.getsockname()[1]
    print(f"http://{host}:{bound}/?token={token}", flush=True)
    print(f"society serve: runs under {root}; Ctrl-C stops", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        create_app(root, token), log_level="warning", timeout_graceful_shutdown=1
    )
    uvicorn.Server(config).run(sockets=[listener])
    return 0
