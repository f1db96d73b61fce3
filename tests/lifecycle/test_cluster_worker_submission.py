"""``society run --task-queue`` (the path ``--profile gke`` takes): the CLI submits to a run worker
that is another process, as the chart's worker is, and runs none itself.

Here the worker is the real entrypoint (``python -m controller.lifecycle.worker``) as a
child process on the session's dev server, with the GKE worker's settings: its own scratch
artifact root, the ledger export to a bucket on fake-gcs-server, and an operator signing key.
It runs the local profile (it is not in a cluster), so the agents are its child processes.
GKE itself, Workload Identity and mTLS to Temporal Cloud are not tested here.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gcs_emulator import FakeGcsServer
from lifecycle_support import PROGRAMS, SocietyCommand
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from controller.lifecycle.driver import RunReport
from controller.lifecycle.remote import result_report
from controller.run import NO_PROGRESS
from controller.run.runid import new_run_id
from controller.stores import gcs as gcs_ledger
from ledger import SigningKey

ROOT = Path(__file__).resolve().parents[2]
NEGOTIATION = ROOT / "examples" / "negotiation.py"
GRADER = ROOT / "examples" / "graders" / "negotiation.py"
BUCKET = "society-ledgers"


@dataclass
class ClusterWorker:
    """The worker process, what it was given, and where it keeps its runs."""

    process: subprocess.Popen[str]
    queue: str
    scratch: Path


@pytest.fixture
def gcs(tmp_path: Path) -> Iterator[FakeGcsServer]:
    server = FakeGcsServer(tmp_path / "gcs")
    server.root.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def operator_key(tmp_path: Path) -> tuple[Path, Path]:
    """The operator's key (PEM, as the chart's Secret holds it) and its public half."""
    key = SigningKey.generate()
    private, public = tmp_path / "operator.pem", tmp_path / "operator.pub"
    private.write_bytes(key.private_pem())
    public.write_text(key.public_key + "\n")
    return private, public


def start_worker(address: str, tmp_path: Path, extra: dict[str, str]) -> ClusterWorker:
    queue = f"cluster-worker-{uuid.uuid4().hex}"
    scratch = tmp_path / "worker-scratch"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TEMPORAL_ADDRESS": address, **extra}
    env["SOCIETY_ARTIFACTS"] = str(scratch)
    process = subprocess.Popen(
        [sys.executable, "-m", "controller.lifecycle.worker", "--task-queue", queue],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = json.loads(process.stdout.readline())
    assert line["worker"] == "polling" and line["taskQueue"] == queue
    return ClusterWorker(process, queue, scratch)


@pytest.fixture
def exporting_worker(
    temporal_address: str,
    tmp_path: Path,
    gcs: FakeGcsServer,
    operator_key: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[ClusterWorker]:
    """The worker as the GKE values configure it: export to the bucket, the operator's key."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)  # for this test's own client
    worker: ClusterWorker | None = None
    try:
        gcs_ledger.storage_client().create_bucket(BUCKET)
        worker = start_worker(
            temporal_address,
            tmp_path,
            {
                "SOCIETY_LEDGER_EXPORT": f"gs://{BUCKET}",
                "STORAGE_EMULATOR_HOST": gcs.url,
                "SOCIETY_SIGNING_KEY": str(operator_key[0]),
            },
        )
        yield worker
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(timeout=60) == 0
    finally:
        if worker is not None and worker.process.poll() is None:
            os.killpg(worker.process.pid, signal.SIGKILL)
            worker.process.wait()


def laptop(society: SocietyCommand, tmp_path: Path) -> SocietyCommand:
    """The submitter: its own artifact root, no storage emulator, the worker's Temporal."""
    env = {k: v for k, v in society.env.items() if k != "STORAGE_EMULATOR_HOST"}
    return SocietyCommand(tmp_path / "laptop" / "artifacts", env)


def blob_text(name: str) -> str:
    blob = gcs_ledger.storage_client().bucket(BUCKET).get_blob(name)
    assert blob is not None, f"gs://{BUCKET}/{name} was not exported"
    return str(blob.download_as_text())


@pytest.mark.slow
def test_a_run_submitted_to_the_cluster_worker_is_exported_verified_pinned_and_graded(
    society: SocietyCommand,
    exporting_worker: ClusterWorker,
    operator_key: tuple[Path, Path],
    tmp_path: Path,
    gcs: FakeGcsServer,
) -> None:
    submitter = laptop(society, tmp_path)
    (submitter.artifacts).mkdir(parents=True)
    ran = submitter.run(NEGOTIATION, "--task-queue", exporting_worker.queue, "--insecure-temporal")
    assert ran.finish() == 0, ran.stderr
    line = ran.result()
    run_id = str(line["runId"])
    assert (line["outcome"], line["exit"], line["receipt"]) == (
        "ProgramFinished",
        "success",
        "complete",
    )
    assert line["ledger"] == f"gs://{BUCKET}/{run_id}/ledger/main"

    # The worker ran it: its prepare wrote the run record under its own scratch root, with its
    # pid, and its execute ran the module content the CLI sent (kept beside the ledger).
    record = json.loads(blob_text(f"{run_id}/run.json"))
    assert record["controllerPid"] == exporting_worker.process.pid
    assert (exporting_worker.scratch / run_id / "ledger" / "main").is_dir()
    assert blob_text(f"{run_id}/module/negotiation.py") == NEGOTIATION.read_text()
    # ... and this process ran no worker: no dev server, no run directory under its root.
    assert not (submitter.artifacts / ".temporal").exists()
    assert not (submitter.artifacts / run_id).exists()
    assert "this process runs no worker" in ran.stderr

    reader = {**submitter.env, "STORAGE_EMULATOR_HOST": gcs.url}
    readers = SocietyCommand(submitter.artifacts, reader)
    verified = readers(
        "ledger", "verify", f"gs://{BUCKET}/{run_id}", "--trusted-key", operator_key[1]
    )
    assert verified.process.returncode == 0, verified.stdout_text + verified.stderr
    verdict = json.loads(verified.stdout_text.splitlines()[-1])
    assert verdict["valid"] is True and verdict["signature"] == "pinned"
    assert line["publicKey"] == operator_key[1].read_text().strip()  # signed by the operator

    graded = readers("grade", GRADER, str(line["ledger"]))
    assert graded.process.returncode == 0, graded.stdout_text + graded.stderr
    assert json.loads(graded.stdout_text.splitlines()[-1])["agreed"] is True


@pytest.mark.slow
def test_an_export_that_fails_on_the_worker_is_reported_as_a_failure_never_success(
    society: SocietyCommand, exporting_worker: ClusterWorker, tmp_path: Path
) -> None:
    run_id = new_run_id()
    # Another run's object already holds this prefix: the worker's export refuses to overwrite.
    bucket = gcs_ledger.storage_client().bucket(BUCKET)
    bucket.blob(f"{run_id}/run.json").upload_from_string(b"another run's record")
    submitter = laptop(society, tmp_path)
    submitter.artifacts.mkdir(parents=True)
    ran = submitter.run(
        NEGOTIATION, "--task-queue", exporting_worker.queue, "--insecure-temporal",
        "--run-id", run_id,
    )  # fmt: skip
    assert ran.finish() == 1, ran.stderr
    line = ran.result()
    assert (line["outcome"], line["exit"], line["ledger"]) == ("PlatformLost", "failure", None)
    assert "export-conflict" in ran.stderr
    assert bucket.get_blob(f"{run_id}/ledger/main/completion.json") is None


@pytest.mark.slow
def test_ctrl_c_cancels_the_workflow_and_the_line_names_the_ledger_the_worker_exported(
    society: SocietyCommand, exporting_worker: ClusterWorker, tmp_path: Path, gcs: FakeGcsServer
) -> None:
    submitter = laptop(society, tmp_path)
    submitter.artifacts.mkdir(parents=True)
    run = submitter.run(
        PROGRAMS / "endless.py", "--task-queue", exporting_worker.queue, "--insecure-temporal"
    )
    run.wait_for_stderr("running program")  # the worker's heartbeat phase, shown here
    run.interrupt()
    assert run.finish() == 130, run.stderr
    line = run.result()
    run_id = str(line["runId"])
    assert (line["outcome"], line["exit"]) == ("Interrupted", "interrupted")
    assert line["ledger"] == f"gs://{BUCKET}/{run_id}/ledger/main"
    readers = SocietyCommand(
        submitter.artifacts, {**submitter.env, "STORAGE_EMULATOR_HOST": gcs.url}
    )
    verified = readers("ledger", "verify", "--allow-incomplete", str(line["ledger"]))
    assert verified.process.returncode == 0, verified.stdout_text + verified.stderr
    assert json.loads(verified.stdout_text.splitlines()[-1])["valid"] is True


def test_a_queue_no_worker_polls_is_named_and_a_second_ctrl_c_stops_waiting_at_once(
    society: SocietyCommand, temporal_address: str
) -> None:
    queue = f"nobody-polls-{uuid.uuid4().hex}"
    run = society.run(NEGOTIATION, "--task-queue", queue, "--insecure-temporal")
    run.wait_for_stderr(f"no worker polls task queue {queue} yet")
    run.interrupt()
    run.wait_for_stderr("SIGINT: stopping the run")
    run.interrupt()
    assert run.finish() == 130, run.stderr
    line = run.result()
    assert (line["outcome"], line["ledger"]) == ("Interrupted", None)
    assert "cancellation is left to the worker" in run.stderr

    async def end(run_id: str) -> None:  # nothing will ever take it: end it for the session
        client = await Client.connect(temporal_address)
        await client.get_workflow_handle(run_id).terminate("test over")

    asyncio.run(end(str(line["runId"])))


@pytest.mark.slow
def test_a_request_the_worker_refuses_is_reported_with_its_reason_and_nothing_ran(
    society: SocietyCommand, temporal_address: str, tmp_path: Path
) -> None:
    # A worker in a cluster refuses a local-profile run before it creates anything.
    worker = start_worker(temporal_address, tmp_path, {"SOCIETY_KUBE_IN_CLUSTER": "1"})
    try:
        submitter = laptop(society, tmp_path)
        submitter.artifacts.mkdir(parents=True)
        ran = submitter.run(NEGOTIATION, "--task-queue", worker.queue, "--insecure-temporal")
        assert ran.finish() == 2, ran.stderr
        assert ran.stdout_text == ""
        assert "runs only cluster profiles" in ran.stderr
        assert not worker.scratch.exists()
    finally:
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait()


def test_an_unauthenticated_temporal_is_refused_and_nothing_is_submitted(
    society: SocietyCommand, temporal_address: str, tmp_path: Path
) -> None:
    run_id = new_run_id()
    ran = society.run(NEGOTIATION, "--task-queue", "society-runs", "--run-id", run_id)
    assert ran.finish() == 2
    assert ran.stdout_text == ""
    assert "without client credentials" in ran.stderr and "--insecure-temporal" in ran.stderr

    async def known() -> bool:
        client = await Client.connect(temporal_address)
        try:
            await client.get_workflow_handle(run_id).describe()
        except RPCError as error:
            assert error.status == RPCStatusCode.NOT_FOUND
            return False
        return True

    assert asyncio.run(known()) is False


def test_a_client_certificate_without_its_key_is_a_typed_error_not_a_traceback(
    society: SocietyCommand, tmp_path: Path
) -> None:
    tls = tmp_path / "temporal-client"
    tls.mkdir()
    (tls / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    society.env["TEMPORAL_TLS_DIR"] = str(tls)
    ran = society.run(NEGOTIATION, "--task-queue", "society-runs")
    assert ran.finish() == 2
    assert "holds only one of tls.crt and tls.key" in ran.stderr and "next step" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_the_gke_profile_submits_to_the_cluster_worker_and_needs_temporal_address(
    society: SocietyCommand,
) -> None:
    env = {k: v for k, v in society.env.items() if k != "TEMPORAL_ADDRESS"}
    ran = SocietyCommand(society.artifacts, env).run(NEGOTIATION, "--profile", "gke")
    assert ran.finish() == 2
    assert "task queue society-runs" in ran.stderr and "TEMPORAL_ADDRESS is not set" in ran.stderr
    assert "next step" in ran.stderr


def _result(export: dict[str, object] | None, *, complete: bool = True) -> dict[str, object]:
    run_id = "sr-" + "2" * 32
    receipt = {
        "run_id": run_id, "ledger_dir": f"/scratch/{run_id}/ledger/main", "complete": complete,
        "record_count": 9, "head_digest": "sha256:" + "0" * 64, "public_key": "ed25519:AAAA",
    }  # fmt: skip
    document: dict[str, object] = {
        "outcome": "ProgramFinished", "exit": "success", "run_id": run_id,
        "ledger_dir": f"/scratch/{run_id}/ledger/main", "receipt": receipt, "records": 9,
        "public_key": "ed25519:AAAA",
    }  # fmt: skip
    if export is not None:
        document["export"] = export
    return document


def _report(document: dict[str, object], *, require_export: bool) -> RunReport:
    return result_report(
        document,
        "sr-" + "2" * 32,
        task_queue="society-runs",
        require_export=require_export,
        progress=NO_PROGRESS,
    )


def test_a_gke_result_without_an_export_is_a_failure_and_an_exported_one_names_the_bucket() -> None:
    run_id = "sr-" + "2" * 32
    export = {
        "url": f"gs://b/{run_id}/", "ledger": f"gs://b/{run_id}/ledger/main", "complete": True,
        "signed_records": 9, "objects": 12, "skipped": 0,
    }  # fmt: skip
    exported = _report(_result(export), require_export=True)
    assert (exported.outcome, exported.exit) == ("ProgramFinished", "success")
    assert exported.ledger_dir == f"gs://b/{run_id}/ledger/main"

    missing = _report(_result(None), require_export=True)
    assert (missing.outcome, missing.exit, missing.ledger_dir) == ("PlatformLost", "failure", None)
    assert missing.cause is not None and missing.cause.startswith("export-missing")

    # Where no bucket is promised (a worker elsewhere), the ledger stays where the worker wrote it.
    kept = _report(_result(None), require_export=False)
    assert (kept.exit, kept.ledger_dir) == ("success", f"/scratch/{run_id}/ledger/main")

    torn = _report(_result({**export, "complete": False}), require_export=True)
    assert (torn.exit, torn.cause and torn.cause.split(":")[0]) == ("failure", "export-mismatch")

    foreign = _report({**_result(export), "run_id": "sr-" + "3" * 32}, require_export=True)
    assert foreign.exit == "failure" and foreign.ledger_dir is None
