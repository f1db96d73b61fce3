"""The ledger's signer process: it holds the key, signs only its run's statements, unreadably.

Each test plays the process that runs the researcher's module, holding the writer's handle on the
signer and nothing more.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from anyio._backends._asyncio import WorkerThread
from ledger_testkit import PROVENANCE, RUN_ID, Counted, catalog, open_test_writer

from ledger import LedgerError, open_ledger_artifacts, open_ledger_writer
from ledger.signer import SignerProcess, SignerSocket
from ledger.signing import SigningKey, decode_public_key

pytestmark = pytest.mark.anyio

RUN = "sr-" + "a" * 32
SIGNER_PROGRAM = str(Path(__file__).resolve().parents[2] / "ledger" / "signer_process.py")
"""Run as a script, as the controller Job's signer container runs it."""
HEAD = "b" * 64


def statement(**fields: object) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def checkpoint(count: int, run_id: str = RUN) -> bytes:
    return statement(runId=run_id, recordCount=count, headDigest=HEAD)


def completion(count: int, records: str = "c" * 64) -> bytes:
    return statement(
        ledgerFormatVersion=1,
        runId=RUN,
        recordCount=count,
        manifestSha256="d" * 64,
        recordsSha256=records,
        headDigest=HEAD,
    )


@pytest.fixture
def signer() -> Iterator[SignerProcess]:
    started = SignerProcess.start(RUN)
    yield started
    started.close()


def refusal(signer: SignerProcess, data: bytes) -> str:
    with pytest.raises(LedgerError) as refused:
        signer.sign(data)
    assert refused.value.reason == "signature-refused"
    return str(refused.value)


def test_the_signer_signs_its_runs_checkpoints_in_increasing_order_and_nothing_else(
    signer: SignerProcess,
) -> None:
    public = decode_public_key(signer.public_key)
    public.verify(base64.b64decode(signer.sign(checkpoint(3))), checkpoint(3))
    assert "other-run" in refusal(signer, checkpoint(9, run_id="sr-" + "f" * 32))
    assert "count-not-increasing" in refusal(signer, checkpoint(3))
    assert "count-not-increasing" in refusal(signer, checkpoint(1))
    assert "not-a-statement" in refusal(
        signer, b'{"recordCount":9,"runId":"' + RUN.encode() + b'"}'
    )
    assert "not-a-statement" in refusal(signer, b"a RouterMessageCommitted the router never made")
    spaced = checkpoint(9).replace(b",", b", ")
    assert "not canonical" in refusal(signer, spaced)
    signer.sign(checkpoint(9))


def test_the_signer_signs_one_completion_and_after_it_nothing_new(signer: SignerProcess) -> None:
    signer.sign(checkpoint(4))
    first = signer.sign(completion(5))
    assert signer.sign(completion(5)) == first, "publishing again signs the same bytes again"
    assert "completed" in refusal(signer, completion(5, records="e" * 64))
    assert "completed" in refusal(signer, checkpoint(6))


async def test_an_unreadable_operator_key_is_a_typed_error_before_the_ledger_exists(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    with pytest.raises(LedgerError) as refused:
        async with open_test_writer(tmp_path / "ledger", key_file=bad):
            pass
    assert refused.value.reason == "signing-key-unreadable"
    assert str(bad) in str(refused.value)
    assert not (tmp_path / "ledger").exists()


async def test_a_ledger_signed_with_an_operator_key_file_verifies_pinned_to_it(
    tmp_path: Path,
) -> None:
    operator = SigningKey.generate()
    key_file = tmp_path / "operator.pem"
    key_file.write_bytes(operator.private_pem())
    async with open_test_writer(tmp_path / "ledger", key_file=key_file) as writer:
        assert writer.public_key == operator.public_key
        await writer.complete()
    view = open_ledger_artifacts(catalog, tmp_path / "ledger", trusted_key=operator.public_key)
    assert view.signature == "pinned" and view.unsigned_records == 0


async def test_the_signer_outlives_the_worker_thread_that_waited_for_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child dies with the thread that started it (PR_SET_PDEATHSIG), and anyio retires idle
    # worker threads (after 10 s; here at once): a signer a worker started would be killed.
    monkeypatch.setattr(WorkerThread, "MAX_IDLE_TIME", 0)
    async with open_test_writer(tmp_path / "ledger") as writer:
        async with anyio.create_task_group() as tasks:  # the worker that waited goes idle first
            tasks.start_soon(anyio.to_thread.run_sync, time.sleep, 0.05)
            tasks.start_soon(anyio.to_thread.run_sync, time.sleep, 0.3)
        await anyio.to_thread.run_sync(time.sleep, 0)  # and is retired here
        await anyio.sleep(0.2)
        await writer.append(Counted(n=1), producer="tester")
        receipt = await writer.complete()
    assert receipt.complete


async def test_a_killed_signer_fails_the_completion_with_a_typed_error_and_keeps_the_prefix(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "ledger"
    async with open_test_writer(directory) as writer:
        await writer.append(Counted(n=1), producer="tester")
        assert writer.signer_pid is not None
        os.kill(writer.signer_pid, signal.SIGKILL)
        with pytest.raises(LedgerError) as lost:
            await writer.complete()
        assert lost.value.reason == "signer-lost"
    view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    assert [record.tag for record in view] == [Counted.tag]
    assert view.signature == "unsigned"


async def test_leaving_the_block_after_the_signer_died_closes_the_ledger_unsigned(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "ledger"
    async with open_test_writer(directory) as writer:
        await writer.append(Counted(n=1), producer="tester")
        assert writer.signer_pid is not None
        os.kill(writer.signer_pid, signal.SIGKILL)
    assert writer.failed is not None and "signer" in str(writer.failed)
    view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    assert [record.tag for record in view] == [Counted.tag]


READER = """
import subprocess, sys
from ledger.signer import SignerProcess

def read(pid, part):
    try:
        open(f"/proc/{pid}/{part}", "rb").read(16)
    except PermissionError:
        return "refused"
    return "read"

signer = SignerProcess.start(sys.argv[1])
plain = subprocess.Popen(["sleep", "30"])
try:
    print(read(plain.pid, "environ"), read(signer.pid, "environ"), read(signer.pid, "mem"))
finally:
    plain.kill()
    signer.close()
"""


def test_a_process_of_the_same_user_cannot_read_the_signers_memory_or_environment() -> None:
    # The reader is the signer's own parent, as the module's process is; it is the same user
    # and holds no capability (an operator's shell), so only the signer's own refusal stops it.
    command = [sys.executable, "-c", READER, RUN]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("playing a user without capabilities as root needs setpriv (util-linux)")
        command = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *command]
    seen = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    plain, environ, mem = seen.stdout.split()
    assert plain == "read", "the reader can read an ordinary child of its own"
    assert (environ, mem) == ("refused", "refused")


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[tuple[Path, SigningKey, subprocess.Popen[bytes]]]:
    """A cluster's signer container, as a process: ``--listen`` on a socket with an operator key
    file that only it reads (the writer below never gets the file's name)."""

    operator = SigningKey.generate()
    key_file = tmp_path / "signer-only" / "key.pem"
    key_file.parent.mkdir()
    key_file.write_bytes(operator.private_pem())
    sock = tmp_path / "signer.sock"
    process = subprocess.Popen(
        [sys.executable, SIGNER_PROGRAM, "--listen", str(sock), RUN_ID, str(key_file)]
    )
    try:
        yield sock, operator, process
    finally:
        process.kill()
        process.wait()


async def test_a_writer_signs_through_a_listening_signer_and_the_ledger_verifies_pinned(
    tmp_path: Path, listening: tuple[Path, SigningKey, subprocess.Popen[bytes]]
) -> None:

    sock, operator, _ = listening
    async with open_ledger_writer(
        tmp_path / "ledger",
        catalog=catalog,
        definition_id="test.definition",
        run_id=RUN_ID,
        provenance=PROVENANCE,
        signer_socket=sock,
    ) as writer:
        assert writer.public_key == operator.public_key
        await writer.append(Counted(n=1), producer="test")
        await writer.complete()
    view = open_ledger_artifacts(catalog, tmp_path / "ledger", trusted_key=operator.public_key)
    assert view.signature == "pinned" and view.unsigned_records == 0


def test_a_second_connection_to_a_listening_signer_is_no_second_run(
    listening: tuple[Path, SigningKey, subprocess.Popen[bytes]],
) -> None:
    """A hostile module beside the controller may connect too: it gets the same one run's
    statements, never an older count, another run's statement or arbitrary bytes."""

    sock, operator, _ = listening
    writer, intruder = SignerSocket.connect(sock), SignerSocket.connect(sock)
    try:
        assert writer.public_key == intruder.public_key == operator.public_key
        writer.sign(statement(runId=RUN_ID, recordCount=5, headDigest=HEAD))
        for data, reason in (
            (statement(runId=RUN_ID, recordCount=5, headDigest=HEAD), "count-not-increasing"),
            (statement(runId=RUN, recordCount=9, headDigest=HEAD), "other-run"),
            (b"a RouterMessageCommitted the router never made", "not-a-statement"),
        ):
            with pytest.raises(LedgerError) as refused:
                intruder.sign(data)
            assert refused.value.reason == "signature-refused" and reason in str(refused.value)
        writer.sign(statement(runId=RUN_ID, recordCount=6, headDigest=HEAD))
    finally:
        writer.close()
        intruder.close()


def test_a_listening_signer_with_a_bad_key_and_a_missing_signer_are_typed_errors(
    tmp_path: Path,
) -> None:

    bad = tmp_path / "key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    sock = tmp_path / "signer.sock"
    process = subprocess.Popen(
        [sys.executable, SIGNER_PROGRAM, "--listen", str(sock), RUN, str(bad)]
    )
    try:
        with pytest.raises(LedgerError) as refused:
            SignerSocket.connect(sock)
        assert refused.value.reason == "signing-key-unreadable" and str(bad) in str(refused.value)
    finally:
        process.kill()
        process.wait()
    with pytest.raises(LedgerError) as lost:
        SignerSocket.connect(tmp_path / "nobody.sock", timeout_s=0.3)
    assert lost.value.reason == "signer-lost" and "nobody.sock" in str(lost.value)
