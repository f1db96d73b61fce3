"""``society ledger export RUN_DIR gs://BUCKET[/PREFIX]`` as a child process, against
fake-gcs-server through the real ``google-cloud-storage`` client: what it prints and exits with
when the export finishes, is already there, has no ledger to export, and loses its server."""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gcs_emulator import FakeGcsServer
from ledger_testkit import RUN_ID, write_ledger

from controller.ops.checks.tools import REPO
from controller.stores import gcs as gcs_ledger
from ledger import SigningKey
from ledger.format import COMPLETION

SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
BUCKET = "society-ledgers"


@pytest.fixture
def gcs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcsServer]:
    server = FakeGcsServer(tmp_path / "gcs")
    server.root.mkdir()
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)  # this test's own client
    gcs_ledger.storage_client().create_bucket(BUCKET)
    try:
        yield server
    finally:
        server.kill()


def completed_run(tmp_path: Path) -> Path:
    """A run directory: a finished, signed ledger under ledger/main and a service log beside it."""
    directory = tmp_path / "runs" / RUN_ID
    write_ledger(directory / "ledger" / "main", 6, key=SigningKey.generate())
    (directory / "model-server.log").write_text("a run service's log\n")
    return directory


def society(*argv: str | Path, emulator: str) -> subprocess.CompletedProcess[str]:
    """The CLI of this checkout (PYTHONPATH), reaching GCS at ``emulator``."""
    env = {**os.environ, "STORAGE_EMULATOR_HOST": emulator, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*SOCIETY, *map(str, argv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def stored(prefix: str = RUN_ID + "/") -> set[str]:
    bucket = gcs_ledger.storage_client().bucket(BUCKET)
    return {blob.name for blob in bucket.list_blobs(prefix=prefix)}


def one_json_line(out: str) -> dict[str, Any]:
    lines = out.splitlines()
    assert len(lines) == 1, lines
    line: dict[str, Any] = json.loads(lines[0])
    return line


class KillingRelay:
    """An HTTP relay in front of fake-gcs-server that kills the server right after it stored
    ``uploads`` objects, before answering the last of them: the export's next request finds
    the server gone, at a known point however fast the machine is."""

    def __init__(self, server: FakeGcsServer, uploads: int) -> None:
        self.server = server
        self.uploads = uploads
        self.stored = 0
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def __enter__(self) -> KillingRelay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        relay = self

        class Relay(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                upstream = http.client.HTTPConnection("127.0.0.1", relay.server.port, timeout=30)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                except OSError:  # the server is down: the client sees its connection drop
                    self.close_connection = True
                    return
                finally:
                    upstream.close()
                if self.command == "POST" and "/upload/" in self.path and response.status == 200:
                    relay.stored += 1
                    if relay.stored == relay.uploads:
                        relay.server.kill()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("connection", "content-length", "transfer-encoding"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Relay


def test_a_completed_run_exports_names_its_url_and_count_and_verifies_from_the_bucket(
    gcs: FakeGcsServer, tmp_path: Path
) -> None:
    source = completed_run(tmp_path)
    files = {p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()}

    exported = society("ledger", "export", source, f"gs://{BUCKET}", emulator=gcs.url)
    assert exported.returncode == 0, exported.stderr
    line = one_json_line(exported.stdout)
    assert line["exported"] == f"gs://{BUCKET}/{RUN_ID}/"
    assert (line["objects"], line["alreadyThere"]) == (len(files), 0)
    assert line["complete"] is True
    assert stored() == {f"{RUN_ID}/{name}" for name in files}

    verified = society("ledger", "verify", f"gs://{BUCKET}/{RUN_ID}", emulator=gcs.url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    summary = one_json_line(verified.stdout)
    assert summary["valid"] is True and summary["signedBy"] == "completion"
    assert summary["runId"] == RUN_ID


def test_exporting_the_same_run_again_skips_every_object_and_still_succeeds(
    gcs: FakeGcsServer, tmp_path: Path
) -> None:
    source = completed_run(tmp_path)
    first = society("ledger", "export", source, f"gs://{BUCKET}/runs/", emulator=gcs.url)
    assert first.returncode == 0, first.stderr
    count = one_json_line(first.stdout)["objects"]

    again = society("ledger", "export", source, f"gs://{BUCKET}/runs", emulator=gcs.url)
    assert again.returncode == 0, again.stderr
    line = one_json_line(again.stdout)
    assert line["exported"] == f"gs://{BUCKET}/runs/{RUN_ID}/"
    assert (line["objects"], line["alreadyThere"]) == (0, count)
    assert len(stored(f"runs/{RUN_ID}/")) == count


def test_a_directory_that_holds_no_ledger_is_refused_with_its_reason_and_nothing_is_exported(
    gcs: FakeGcsServer, tmp_path: Path
) -> None:
    not_a_run = tmp_path / "runs" / RUN_ID
    not_a_run.mkdir(parents=True)
    (not_a_run / "notes.txt").write_text("not a ledger\n")

    refused = society("ledger", "export", not_a_run, f"gs://{BUCKET}", emulator=gcs.url)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "society ledger export: error (export-ledger-invalid):" in refused.stderr
    assert "holds no ledger that verifies" in refused.stderr
    assert "nothing was exported" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert stored() == set()


def test_the_server_going_down_mid_export_exits_non_zero_saying_unfinished_and_how_to_resume(
    gcs: FakeGcsServer, tmp_path: Path
) -> None:
    source = completed_run(tmp_path)
    with KillingRelay(gcs, uploads=2) as relay:
        failed = society(
            "ledger", "export", "--deadline", "3", source, f"gs://{BUCKET}", emulator=relay.url
        )
    assert failed.returncode == 1, failed.stdout
    assert failed.stdout == ""
    assert "society ledger export: error (export-failed):" in failed.stderr
    assert "the export is unfinished" in failed.stderr
    assert "again to resume" in failed.stderr
    assert "Traceback" not in failed.stderr

    gcs.start()  # the two stored objects are still on disk, as after an outage
    assert len(stored()) == 2 and not any(name.endswith(COMPLETION) for name in stored())
    unfinished = society("ledger", "verify", f"gs://{BUCKET}/{RUN_ID}", emulator=gcs.url)
    assert unfinished.returncode == 1
    assert one_json_line(unfinished.stdout)["reason"] == "export-unfinished"

    resumed = society("ledger", "export", source, f"gs://{BUCKET}", emulator=gcs.url)
    assert resumed.returncode == 0, resumed.stderr
    assert one_json_line(resumed.stdout)["alreadyThere"] == 2
    verified = society("ledger", "verify", f"gs://{BUCKET}/{RUN_ID}", emulator=gcs.url)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def resume_command(stderr: str) -> list[str]:
    """The command the failure message says to run again."""
    found = re.search(r"Run `society (ledger export [^`]+)` again to resume", stderr)
    assert found, stderr
    return shlex.split(found.group(1))


def test_the_resume_command_the_failure_names_finishes_the_same_export(
    gcs: FakeGcsServer, tmp_path: Path
) -> None:
    source = completed_run(tmp_path)
    with KillingRelay(gcs, uploads=2) as relay:
        failed = society(
            "ledger", "export", "--deadline", "3", source, f"gs://{BUCKET}", emulator=relay.url
        )
    assert failed.returncode == 1
    gcs.start()

    resumed = society(*resume_command(failed.stderr), emulator=gcs.url)
    assert resumed.returncode == 0, resumed.stderr
    line = one_json_line(resumed.stdout)
    assert line["exported"] == f"gs://{BUCKET}/{RUN_ID}/"
    assert line["alreadyThere"] == 2
    assert f"{RUN_ID}/ledger/main/{COMPLETION}" in stored()
