"""``society run`` end to end on the local profile: real Temporal, real kernel, real agents."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from lifecycle_support import PROGRAMS, Society, SocietyCommand, processes_naming, wait_until

from ledger import SigningKey

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESULT_KEYS = {
    "outcome", "exit", "runId", "ledger", "receipt", "records", "publicKey", "usage", "headDigest",
    "value", "valueNote",
}  # fmt: skip


def verify(society: SocietyCommand, ledger: object, *flags: str) -> dict[str, object]:
    verified = society("ledger", "verify", str(ledger), *flags)
    document = json.loads(verified.stdout_text)
    assert verified.process.returncode == 0, verified.stdout_text + verified.stderr
    assert isinstance(document, dict)
    return document


def test_a_run_succeeds_and_its_ledger_verifies(society: SocietyCommand) -> None:
    run = society.run(EXAMPLES / "negotiation.py", "--seed", "7")
    assert run.finish() == 0, run.stderr
    result = run.result()
    assert set(result) == RESULT_KEYS
    assert result["outcome"] == "ProgramFinished" and result["exit"] == "success"
    assert result["receipt"] == "complete" and isinstance(result["records"], int)
    assert str(result["runId"]).startswith("sr-") and len(str(result["runId"])) == 35
    assert str(result["ledger"]).startswith(str(society.artifacts / str(result["runId"])))
    assert "temporal ui: " in run.stderr and "running program" in run.stderr

    verified = verify(society, result["ledger"])
    assert verified["valid"] is True
    assert processes_naming(str(result["runId"])) == []

    status = society("status", str(result["runId"]), "--artifacts", society.artifacts)
    assert status.process.returncode == 0, status.stderr
    assert status.result() | {"state": "finished"} == {"state": "finished", **result, "cause": None}


def test_a_failing_program_exits_1_with_a_complete_ledger(society: SocietyCommand) -> None:
    run = society.run(PROGRAMS / "failing.py")
    assert run.finish() == 1, run.stderr
    result = run.result()
    assert (result["outcome"], result["exit"], result["receipt"]) == (
        "ProgramFinished",
        "failure",
        "complete",
    )
    assert verify(society, result["ledger"])["valid"] is True


def _start_endless(society: SocietyCommand, *args: str) -> tuple[Society, str]:
    run = society.run(PROGRAMS / "endless.py", *args)
    run.wait_for_stderr("running program")
    [run_id] = [line.split()[1].rstrip(":") for line in run.stderr_lines if line.startswith("run ")]
    wait_until(lambda: len(processes_naming(run_id)) >= 2, 10)
    assert len(processes_naming(run_id)) >= 2, "both agents run during the program"
    time.sleep(0.3)  # let the program commit a few ticks
    return run, run_id


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_the_program_finalizes_the_ledger_and_reaps_every_process(
    society: SocietyCommand, signum: int, code: int
) -> None:
    run, run_id = _start_endless(society)
    run.interrupt(signum)
    assert run.finish() == code, run.stderr
    result = run.result()
    assert result["outcome"] == "Interrupted" and result["exit"] == "interrupted"
    assert result["runId"] == run_id
    assert "cleanup: done" in run.stderr
    assert processes_naming(run_id) == []

    verified = verify(society, result["ledger"], "--allow-incomplete")
    assert verified["valid"] is True
    if result["receipt"] == "complete":
        assert verified["records"] == result["records"]
    else:  # finalization could not complete: the ledger says precisely where it stops
        assert verified["complete"] is False


def test_a_sigkilled_controller_leaves_no_agent_and_an_incomplete_ledger_the_next_start_reaps(
    society: SocietyCommand,
) -> None:
    run, run_id = _start_endless(society)
    run_dir = society.artifacts / run_id
    records = next(run_dir.glob("ledger/*/records.ndjson"))
    assert wait_until(lambda: b"ledger.checkpoint/v1" in records.read_bytes(), 30)
    run.process.kill()  # the controller alone, as the OOM killer would
    run.finish()
    assert run.stdout_text == ""
    assert wait_until(lambda: processes_naming(run_id) == [], 10), "agents die with the controller"

    [ledger] = run_dir.glob("ledger/*")
    assert not (ledger / "completion.json").exists()
    verified = verify(society, ledger, "--allow-incomplete")
    assert verified["valid"] is True and verified.get("complete") is False, (verified, run.stderr)
    assert verified["lastCheckpoint"] >= 1, "a signature covers the records up to the checkpoint"

    status = society("status", run_id, "--artifacts", society.artifacts)  # the next start
    assert status.process.returncode == 0, status.stderr
    abandoned = status.result()
    assert (abandoned["state"], abandoned["receipt"]) == ("abandoned", "incomplete")
    assert abandoned["workflow"] == "terminated", "the next start ends the orphaned workflow"
    assert not (run_dir / "pids").exists() and not (run_dir / "sandboxes").exists()


@pytest.mark.parametrize("first", ["status", "cancel"])
def test_the_first_command_after_a_sigkilled_controller_answers_although_it_stops_the_dev_server(
    society: SocietyCommand, first: str
) -> None:
    """The killed run held the root's dev server alone: the first command's reaping ends the
    orphaned workflow and stops that server, and it still answers from what it saw."""
    del society.env["TEMPORAL_ADDRESS"]  # the run starts the root's own dev server
    run, run_id = _start_endless(society)
    state_file = society.artifacts / ".temporal" / "server.json"
    server_pid = json.loads(state_file.read_text())["pid"]
    run.process.kill()
    run.finish()
    assert wait_until(lambda: processes_naming(run_id) == [], 10), "agents die with the controller"

    if first == "status":
        status = society("status", run_id, "--artifacts", society.artifacts)
        assert status.process.returncode == 0, status.stderr
        assert "Traceback" not in status.stderr, status.stderr
        abandoned = status.result()
        assert (abandoned["state"], abandoned["receipt"]) == ("abandoned", "incomplete")
        assert abandoned["workflow"] == "terminated", "this start ended the orphaned workflow"
    else:
        cancel = society("cancel", run_id, "--artifacts", society.artifacts)
        assert cancel.process.returncode == 1, cancel.stdout_text + cancel.stderr
        assert cancel.stdout_text == "" and "Traceback" not in cancel.stderr, cancel.stderr
        assert f"society cancel: error: run {run_id} is not live" in cancel.stderr
    assert not state_file.exists(), "no live run holds the dev server: the first command stops it"
    assert wait_until(lambda: not Path(f"/proc/{server_pid}").exists(), 10)

    again = society("status", run_id, "--artifacts", society.artifacts)
    assert again.process.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert again.result()["state"] == "abandoned"


def test_no_reachable_temporal_is_a_clear_error_with_the_next_step(
    society: SocietyCommand,
) -> None:
    from lifecycle_support import free_port

    society.env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    run = society.run(EXAMPLES / "negotiation.py")
    assert run.finish() == 2
    assert time.monotonic() - started < 30
    assert run.stdout_text == ""
    assert "no Temporal server answers at 127.0.0.1:" in run.stderr
    assert "next step: start a Temporal server" in run.stderr
    assert "unset TEMPORAL_ADDRESS" in run.stderr


def test_a_run_id_has_one_format(society: SocietyCommand) -> None:
    bad = society("run", EXAMPLES / "negotiation.py", "--run-id", "run-1")
    assert bad.process.returncode == 2
    assert "'sr-' followed by 32 lowercase hex digits" in bad.stderr

    chosen = "sr-" + "c0ffee" * 5 + "00"
    run = society.run(EXAMPLES / "negotiation.py", "--run-id", chosen)
    assert run.finish() == 0, run.stderr
    assert run.result()["runId"] == chosen
    again = society.run(EXAMPLES / "negotiation.py", "--run-id", chosen)
    assert again.finish() == 2
    assert f"{chosen} exists" in again.stderr


def test_status_and_cancel_act_on_a_live_run_from_another_process(
    society: SocietyCommand,
) -> None:
    del society.env["TEMPORAL_ADDRESS"]  # the run starts the root's dev server; others find it
    run, run_id = _start_endless(society)
    state_file = society.artifacts / ".temporal" / "server.json"
    server_pid = json.loads(state_file.read_text())["pid"]

    status = society("status", run_id, "--artifacts", society.artifacts)
    assert status.process.returncode == 0, status.stderr
    live = status.result()
    assert (live["state"], live["workflow"], live["step"]) == ("running", "running", "execute")
    assert live["phase"] == "running program"
    assert str(live["ui"]).endswith(f"/namespaces/default/workflows/{run_id}")

    cancel = society("cancel", run_id, "--artifacts", society.artifacts)
    assert cancel.process.returncode == 0, cancel.stderr
    assert cancel.result() == {"runId": run_id, "cancel": "done", "workflow": "cancelled"}
    assert run.finish() == 130, run.stderr
    assert run.result()["outcome"] == "Interrupted"
    assert processes_naming(run_id) == []

    finished = society("status", run_id, "--artifacts", society.artifacts).result()
    assert finished["state"] == "finished" and finished["outcome"] == "Interrupted"
    assert state_file.exists(), "the server outlives the last run for the idle period"
    assert (state_file.parent / "idle-since").exists()
    stopped = society("temporal", "stop", "--artifacts", society.artifacts)
    assert stopped.process.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout_text) == {"stopped": True, "pid": server_pid, "liveRuns": []}
    assert not state_file.exists()
    assert wait_until(lambda: not Path(f"/proc/{server_pid}").exists(), 10)


def test_a_second_signal_stops_at_once_reaping_from_the_controller(
    society: SocietyCommand,
) -> None:
    run, run_id = _start_endless(society)
    run.interrupt()
    run.wait_for_stderr("SIGINT: stopping the run")
    run.interrupt()
    assert run.finish() == 130, run.stderr
    assert run.result()["outcome"] == "Interrupted"
    assert "cleanup: reaping the run's processes from the controller" in run.stderr
    assert processes_naming(run_id) == []
    verify(society, run.result()["ledger"], "--allow-incomplete")


@pytest.mark.parametrize("hold", ["block", "swallow"])
def test_a_program_that_blocks_its_loop_or_ignores_cancellation_cannot_hold_the_run(
    society: SocietyCommand, hold: str
) -> None:
    """The program runs in the module's own process: one that blocks its event loop, or
    swallows its cancellation, never sees the end it is asked for; the second signal stops the
    run at once anyway, with its ledger finalized, and the module's process ends with it."""
    society.env["HOLD"] = hold
    run = society.run(PROGRAMS / "unstoppable.py")
    run.wait_for_stderr("running program")
    [run_id] = [line.split()[1].rstrip(":") for line in run.stderr_lines if line.startswith("run ")]
    assert wait_until(lambda: len(processes_naming(run_id)) >= 2, 10)

    def module_host() -> list[int]:
        hosts = processes_naming("controller.program.host")
        return [pid for pid in processes_naming(str(PROGRAMS / "unstoppable.py")) if pid in hosts]

    assert module_host() != []
    run.interrupt()
    run.wait_for_stderr("SIGINT: stopping the run")
    time.sleep(1)
    assert run.process.poll() is None, "a cancelled program is given time to end"
    run.interrupt()
    run.wait_for_stderr("SIGINT again: stopping at once", 30)
    assert run.finish(60) == 130, run.stderr
    assert "exiting now, without finalizing" not in run.stderr
    result = run.result()
    assert (result["outcome"], result["receipt"]) == ("Interrupted", "complete"), result
    assert wait_until(lambda: processes_naming(run_id) == [], 10), "its agents are reaped"
    assert module_host() == [], "the module's process ended with the run"
    verified = verify(society, result["ledger"])
    assert verified["valid"] is True and "complete" not in verified


def test_losing_the_temporal_server_mid_program_is_platform_lost(society: SocietyCommand) -> None:
    del society.env["TEMPORAL_ADDRESS"]  # the run's own dev server, which this test kills
    run, run_id = _start_endless(society)
    server = json.loads((society.artifacts / ".temporal" / "server.json").read_text())
    os.kill(server["pid"], signal.SIGKILL)
    assert run.finish() == 1, run.stderr
    result = run.result()
    assert (result["outcome"], result["exit"]) == ("PlatformLost", "failure")
    assert f"the Temporal server at {server['address']} is gone" in run.stderr
    assert processes_naming(run_id) == []
    verified = verify(society, result["ledger"], "--allow-incomplete")
    assert verified.get("complete", True) is (result["receipt"] == "complete")


def test_a_module_that_is_not_an_experiment_is_refused_before_anything_runs(
    society: SocietyCommand, tmp_path: Path
) -> None:
    module = tmp_path / "not_an_experiment.py"
    module.write_text("value = 1\n")
    run = society.run(module)
    assert run.finish() == 2, run.stderr
    assert run.stdout_text == ""
    assert "society run: error: " in run.stderr and "run_spec" in run.stderr


def test_an_operator_key_signs_the_ledger_and_verifies_as_pinned(
    society: SocietyCommand, tmp_path: Path
) -> None:
    key = SigningKey.generate()
    key_file = tmp_path / "operator.pem"
    key_file.write_bytes(key.private_pem())
    public_file = tmp_path / "operator.pub"
    public_file.write_text(key.public_key)
    society.env["SOCIETY_SIGNING_KEY"] = str(key_file)

    run = society.run(EXAMPLES / "negotiation.py", "--seed", "3")
    assert run.finish() == 0, run.stderr
    result = run.result()
    assert result["publicKey"] == key.public_key

    pinned = verify(society, result["ledger"], "--trusted-key", str(public_file))
    assert pinned["valid"] is True and pinned["signature"] == "pinned"
    stranger = tmp_path / "stranger.pub"
    stranger.write_text(SigningKey.generate().public_key)
    refused = society("ledger", "verify", str(result["ledger"]), "--trusted-key", stranger)
    assert refused.process.returncode == 1
    assert json.loads(refused.stdout_text) | {"detail": ""} == {
        "valid": False,
        "reason": "key-not-trusted",
        "detail": "",
    }
    ledger_files = b"".join(p.read_bytes() for p in Path(str(result["ledger"])).iterdir())
    assert key.private_pem() not in ledger_files


def test_a_module_that_cannot_load_fails_before_temporal_a_run_id_or_a_run_directory(
    society: SocietyCommand, tmp_path: Path
) -> None:
    del society.env["TEMPORAL_ADDRESS"]  # a run that started anything would start a dev server
    module = tmp_path / "broken.py"
    module.write_text("from controller import RunSpec\nrun_spec = RunSpec.define(\n")
    run = society.run(module)
    assert run.finish(timeout_s=60) == 2, run.stderr
    assert run.stdout_text == ""
    [error, next_step] = run.stderr.strip().splitlines()  # the error is one line
    assert error.startswith("society run: error: importing ")
    assert error.endswith(": SyntaxError: '(' was never closed (broken.py, line 2)"), error
    assert next_step.startswith("  next step: fix")
    assert "next step: fix" in run.stderr and "nothing was started" in run.stderr
    assert "Traceback" not in run.stderr and "temporal" not in run.stderr.lower()
    assert not society.artifacts.exists() or list(society.artifacts.iterdir()) == []


def test_status_tells_running_finalizing_and_finished_apart_around_a_cancel(
    society: SocietyCommand, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    society.env["GATE"] = str(gate)  # the program holds its finalization until gate/release
    run = society.run(PROGRAMS / "gated.py", "--writable", str(gate))
    run.wait_for_stderr("running program")
    [run_id] = [line.split()[1].rstrip(":") for line in run.stderr_lines if line.startswith("run ")]

    def state() -> dict[str, object]:
        status = society("status", run_id, "--artifacts", society.artifacts)
        assert status.process.returncode == 0, status.stderr
        return status.result()

    assert state()["state"] == "running"
    cancel = society("cancel", run_id, "--artifacts", society.artifacts, "--no-wait")
    assert cancel.result() == {
        "runId": run_id,
        "cancel": "requested",
        "workflow": "cancel-requested",
    }
    assert wait_until(lambda: (gate / "holding").exists(), 30)
    finalizing = state()
    assert finalizing["state"] == "finalizing", finalizing
    assert finalizing["cancelRequested"] is True and finalizing["receipt"] == "incomplete"
    (gate / "release").touch()
    assert run.finish() == 130, run.stderr
    finished = state()
    assert (finished["state"], finished["outcome"]) == ("finished", "Interrupted")
