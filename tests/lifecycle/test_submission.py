"""Authenticated submission on the local profile: another local process that reaches the run's
Temporal cannot make the run's worker import or run anything, nor make ``society run`` report a
result its own worker did not prove; and a request names only the places it states.

The attacker (``intruder.py``) is a separate process that knows what any local process can
learn: the server's address (from the state file, or by scanning loopback), the run id and
whatever Temporal shows about the run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from lifecycle_support import (
    PROGRAMS,
    LineReader,
    Society,
    SocietyCommand,
    processes_naming,
    wait_until,
)
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.models import RunReservation
from controller.lifecycle.submission import ProvenRequest, ResultUnproven, RunAuthority
from controller.run import RunRequest, RunResult
from controller.run.request import RunRequestError
from ledger.records import LedgerReceipt

INTRUDER = Path(__file__).resolve().parent / "intruder.py"
ATTACKER_MODULE = """\
from pathlib import Path
Path({marker!r}).write_text("the attacker's module ran in the victim's process")
"""


def _gated(society: SocietyCommand, gate: Path, *args: str) -> tuple[Society, str]:
    """``society run`` of a program that returns once ``gate/go`` exists; its run id."""
    gate.mkdir(exist_ok=True)
    society.env["GATE"] = str(gate)
    run = society.run(PROGRAMS / "gated.py", "--writable", str(gate), *args)
    run.wait_for_stderr("running program")
    [run_id] = [line.split()[1].rstrip(":") for line in run.stderr_lines if line.startswith("run ")]
    return run, run_id


def _intruder(society: SocietyCommand, *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(INTRUDER), *map(str, args)],
        env=society.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _next_line(process: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    """The process's next stdout line as JSON, or an AssertionError after ``timeout_s``."""
    assert process.stdout is not None
    reader = _READERS.setdefault(process.pid, LineReader(process.stdout.fileno()))
    line = reader.next_line(timeout_s)
    if line is None:
        raise AssertionError(
            "the intruder ended without a line"
            if reader.ended
            else f"no line from the intruder within {timeout_s:.0f}s"
        )
    document = json.loads(line)
    assert isinstance(document, dict)
    return document


_READERS: dict[int, LineReader] = {}  # one per intruder: it holds lines read but not yet taken


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _assert_authentic(society: SocietyCommand, run: Society, run_id: str) -> dict[str, object]:
    """The run's line is its own: it matches the ledger on disk, which verifies."""
    result = run.result()
    assert (result["outcome"], result["exit"], result["runId"]) == (
        "ProgramFinished",
        "success",
        run_id,
    )
    verified = society("ledger", "verify", str(result["ledger"]))
    document = json.loads(verified.stdout_text)
    assert document["valid"] is True, document
    assert document["records"] == result["records"]
    assert str(result["ledger"]).startswith(str(society.artifacts / run_id))
    return result


@pytest.mark.slow
def test_a_second_process_cannot_run_its_module_through_a_live_runs_task_queue(
    society: SocietyCommand, tmp_path: Path
) -> None:
    del society.env["TEMPORAL_ADDRESS"]  # the run's own dev server, found through its state file
    marker = tmp_path / "hijacked"
    module = tmp_path / "attacker.py"
    module.write_text(ATTACKER_MODULE.format(marker=str(marker)))
    elsewhere = tmp_path / "attacker-artifacts"
    gate = tmp_path / "gate"
    run, run_id = _gated(society, gate)
    state_file = society.artifacts / ".temporal" / "server.json"

    intruder = _intruder(society, "hijack", state_file, run_id, module, elsewhere)
    out, err = intruder.communicate(timeout=300)
    assert intruder.returncode == 0, err
    attempts = {attempt["attempt"]: attempt for attempt in _lines(out)}
    assert set(attempts) == {"unproven", "made-up-proof", "replayed"}
    for name, attempt in attempts.items():
        assert attempt["ended"] == "failed", (name, attempt)
        types = [cause["type"] for cause in attempt["causes"]]
        assert "RunRequestRefused" in types, (name, attempt)
    refusals = {name: attempt["causes"][-1]["message"] for name, attempt in attempts.items()}
    assert "does not carry the MAC" in refusals["unproven"]
    assert "does not carry the MAC" in refusals["made-up-proof"]
    assert "serves only the run" in refusals["replayed"]

    assert not marker.exists(), "the attacker's module ran inside the victim's `society run`"
    assert not elsewhere.exists(), "the victim's worker created a directory the attacker named"
    assert run.process.poll() is None, "the victim's run is still live"
    (gate / "go").touch()
    assert run.finish() == 0, run.stderr
    _assert_authentic(society, run, run_id)
    assert not marker.exists()
    assert processes_naming(run_id) == []


@pytest.mark.slow
def test_a_rogue_worker_on_the_runs_task_queue_changes_nothing(
    society: SocietyCommand, tmp_path: Path, temporal_address: str
) -> None:
    run_id = "sr-" + os.urandom(16).hex()
    stop = tmp_path / "stop-rogue"
    rogue = _intruder(society, "rogue", temporal_address, f"society-run-{run_id}", stop)
    try:
        assert _next_line(rogue, 60)["rogue"] == "polling"
        gate = tmp_path / "gate"
        run, _ = _gated(society, gate, "--run-id", run_id)
        (gate / "go").touch()
        assert run.finish() == 0, run.stderr
        _assert_authentic(society, run, run_id)
    finally:
        stop.touch()
        out, err = rogue.communicate(timeout=30)
    # what the rogue answered (if it was handed anything) never became the run's result
    assert "424242" not in run.stdout_text
    print("rogue answered:", _lines(out) or "nothing", err)


@pytest.mark.slow
def test_a_result_the_runs_own_worker_did_not_prove_is_refused(
    society: SocietyCommand, tmp_path: Path, temporal_address: str
) -> None:
    """The rogue gets the victim's workflow task (the victim is stopped until its sticky task
    times out) and completes the workflow with a made-up ``RunResult``: `society run` refuses it,
    finalizes its own ledger and reports the run as lost, never the forgery."""
    run_id = "sr-" + os.urandom(16).hex()
    stop = tmp_path / "stop-rogue"
    gate = tmp_path / "gate"
    run, _ = _gated(society, gate, "--run-id", run_id)
    rogue = _intruder(society, "rogue", temporal_address, f"society-run-{run_id}", stop)
    try:
        assert _next_line(rogue, 60)["rogue"] == "polling"
        os.kill(run.pid, signal.SIGSTOP)
        try:
            nudge = _signal_workflow(society, run_id)  # any new event asks for a workflow task
            assert nudge.returncode == 0, nudge.stderr
            answered = _next_line(rogue, 90)  # after the worker's sticky timeout (10 s)
            assert answered == {"answered": "workflow-task", "forged": "RunResult"}
            (gate / "release").touch()  # cancelled, gated.py holds its finalization till then
        finally:
            os.kill(run.pid, signal.SIGCONT)
        assert run.finish() == 1, run.stderr
    finally:
        stop.touch()
        rogue.communicate(timeout=30)
    result = run.result()
    assert (result["outcome"], result["exit"]) == ("PlatformLost", "failure")
    assert result["records"] != 424242 and result["publicKey"] != "ed25519:forged"
    assert "refused the result of run" in run.stderr and "does not carry the MAC" in run.stderr
    assert result["ledger"] is not None and str(result["ledger"]).startswith(
        str(society.artifacts / run_id)
    )
    # One cancel, wound down to the end: a second (the SDK's and the run's own both came at
    # once) landed in the wind-down and skipped the agents' harvest.
    harvested = [line for line in run.stderr_lines if line.startswith("agents harvested")]
    assert harvested and harvested[-1].endswith("2/2"), run.stderr
    assert result["receipt"] == "complete", run.stderr
    verified = society("ledger", "verify", str(result["ledger"]))
    assert json.loads(verified.stdout_text)["valid"] is True
    assert wait_until(lambda: processes_naming(run_id) == [], 10)


def _signal_workflow(society: SocietyCommand, run_id: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import asyncio, sys\n"
        "from temporalio.client import Client\n"
        "async def main():\n"
        "    client = await Client.connect(sys.argv[1])\n"
        "    await client.get_workflow_handle(sys.argv[2]).signal('nudge')\n"
        "asyncio.run(main())\n"
        "import os; os._exit(0)  # skip the SDK's native teardown, seen to crash\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, society.env["TEMPORAL_ADDRESS"], run_id],
        env=society.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_the_dev_servers_state_is_its_owners_only(society: SocietyCommand, tmp_path: Path) -> None:
    del society.env["TEMPORAL_ADDRESS"]
    gate = tmp_path / "gate"
    run, _ = _gated(society, gate)
    state_dir = society.artifacts / ".temporal"
    state_file = state_dir / "server.json"
    try:
        assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        nobody = subprocess.run(
            ["cat", str(state_file)], user=65534, capture_output=True, text=True, timeout=30
        )
        assert nobody.returncode != 0 and "Permission denied" in nobody.stderr
        assert nobody.stdout == ""
    finally:
        (gate / "go").touch()
    assert run.finish() == 0, run.stderr


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("module_path", "experiment.py", "module-path-invalid"),
        ("module_path", "/srv/runs/../../etc/passwd.py", "module-path-invalid"),
        ("module_path", "/srv/runs/./experiment.py", "module-path-invalid"),
        ("module_path", "/srv/runs/experiment.txt", "module-path-invalid"),
        ("module_path", "/srv/runs/exp\neriment.py", "module-path-invalid"),
        ("module_path", "//srv/experiment.py", "module-path-invalid"),
        ("artifact_root", "artifacts", "artifact-root-invalid"),
        ("artifact_root", "/srv/artifacts/../../root", "artifact-root-invalid"),
        ("artifact_root", "/srv/artifacts/", "artifact-root-invalid"),
        ("ledger_ref", "../../elsewhere", "ledger-ref-invalid"),
        ("ledger_ref", "a/b", "ledger-ref-invalid"),
        ("ledger_ref", "..", "ledger-ref-invalid"),
        ("ledger_ref", "", "ledger-ref-invalid"),
        ("run_id", "sr-../../x", "bad-run-id"),
    ],
)
def test_a_request_names_only_absolute_normalised_places(
    field: str, value: str, reason: str
) -> None:
    fields = {
        "module_path": "/srv/runs/experiment.py",
        "run_id": "sr-" + "0" * 32,
        "artifact_root": "/srv/artifacts",
        "ledger_ref": "main",
        field: value,
    }
    with pytest.raises(ValueError) as refused:
        RunRequest.build(**fields)
    assert getattr(refused.value, "reason", None) == reason, refused.value
    assert field in str(refused.value) or reason == "bad-run-id"
    with pytest.raises(ValidationError):
        RunRequest(**fields)  # the model itself, as a worker decodes a payload


def test_a_well_formed_request_is_accepted_as_is() -> None:
    request = RunRequest.build(
        module_path="/srv/runs/experiment.py",
        run_id="sr-" + "0" * 32,
        artifact_root="/srv/artifacts",
        ledger_ref="main.v2",
    )
    assert (request.module_path, request.artifact_root) == (
        "/srv/runs/experiment.py",
        "/srv/artifacts",
    )
    assert isinstance(RunRequestError("y", reason="x"), ValueError)


def test_only_the_runs_own_mac_makes_a_result_acceptable() -> None:
    request = RunRequest.build(
        module_path="/srv/runs/experiment.py",
        run_id="sr-" + "1" * 32,
        artifact_root="/srv/artifacts",
    )
    authority = RunAuthority(request)
    ledger = f"/srv/artifacts/{request.run_id}/ledger/main"
    receipt = LedgerReceipt(
        ledger_dir=ledger,
        run_id=request.run_id,
        record_count=12,
        head_digest="ab" * 32,
        public_key="ed25519:abc",
        complete=True,
    )
    result = RunResult(
        outcome="ProgramFinished",
        exit="success",
        run_id=request.run_id,
        ledger_dir=ledger,
        receipt=receipt,
        records=12,
        public_key="ed25519:abc",
        usage={"total": {"tokens": 3, "cost": 0.25}},
    )
    proven = json.loads(json.dumps(authority.prove(result).model_dump(mode="json")))  # the wire
    assert authority.accept(proven) == result

    forgeries = {
        "no proof": result.model_dump(mode="json"),
        "made-up proof": {**proven, "proof": os.urandom(32).hex()},
        "altered after proving": {**proven, "records": 13},
        "another run's key": RunAuthority(request).prove(result).model_dump(mode="json"),
    }
    for name, forged in forgeries.items():
        with pytest.raises(ResultUnproven) as refused:
            authority.accept(forged)
        assert refused.value.reason == "result-unproven", name
    with pytest.raises(ResultUnproven) as malformed:
        authority.accept({"outcome": "ProgramFinished"})
    assert malformed.value.reason == "result-malformed"

    submission = json.dumps(authority.submission())
    assert authority._key.hex() not in submission and repr(authority._key) not in repr(authority)


def test_the_runs_worker_refuses_replays_foreign_executions_and_foreign_cleanups(
    tmp_path: Path,
) -> None:
    """Inside the run's own workflow execution (as a rogue that took its workflow task could
    schedule them): a second execute of the genuine request and a cleanup of another run."""
    root = tmp_path / "artifacts"
    request = RunRequest.build(
        module_path=str(PROGRAMS / "gated.py"), run_id="sr-" + "2" * 32, artifact_root=str(root)
    )
    authority = RunAuthority(request)
    activities = LifecycleActivities(authority=authority)
    genuine = ProvenRequest.model_validate(authority.submission())
    decoy = root / ("sr-" + "3" * 32)
    (decoy / "pids").mkdir(parents=True)
    (decoy / "pids" / "agent").write_text("1")
    own_execution = ActivityEnvironment.default_info()
    own_execution = replace(own_execution, workflow_id=request.run_id, workflow_run_id="own-run")
    other_execution = replace(own_execution, workflow_run_id="another-run")

    async def scenario() -> dict[str, str]:
        refusals = {}
        authority.started("own-run")
        environment = ActivityEnvironment()
        environment.info = other_execution
        with pytest.raises(ApplicationError) as foreign:
            await environment.run(activities.prepare, genuine)
        refusals["foreign execution"] = str(foreign.value.details[0])
        environment.info = own_execution
        reservation = await environment.run(activities.prepare, genuine)
        assert reservation.artifact_dir == str(root / request.run_id)
        with pytest.raises(ApplicationError) as cleanup:
            await environment.run(
                activities.cleanup,
                RunReservation(run_id=decoy.name, namespace=decoy.name, artifact_dir=str(decoy)),
            )
        refusals["foreign cleanup"] = str(cleanup.value.details[0])
        await environment.run(authority.admit, genuine, execute=True)
        with pytest.raises(ApplicationError) as replayed:
            await environment.run(activities.execute, genuine)
        refusals["second execute"] = str(replayed.value.details[0])
        for error in (foreign.value, cleanup.value, replayed.value):
            assert (error.type, error.non_retryable) == ("RunRequestRefused", True)
        return refusals

    assert anyio.run(scenario) == {
        "foreign execution": "execution-foreign",
        "foreign cleanup": "reservation-foreign",
        "second execute": "execute-replayed",
    }
    assert (decoy / "pids" / "agent").read_text() == "1", "another run's records are untouched"
