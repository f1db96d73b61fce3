"""The run worker entrypoint (``python -m controller.lifecycle.worker``) as a real child
process on the session's dev server: it polls, runs ``SocietyRun`` to completion for the local
profile (its own process is the controller), and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from controller.lifecycle.run_files import run_record
from controller.run import RunRequest, RunResult
from controller.run.runid import new_run_id

MODULE = """
from controller import RunSpec
from controller.agents import scripted


async def execute(ctx):
    return sorted(ctx.agents)


run_spec = RunSpec.define(
    id="lifecycle-test.worker/v1",
    agents={"alice": scripted(), "bob": scripted()},
    execute=execute,
)
"""


def start_worker(address: str | None, queue: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TEMPORAL_ADDRESS", None)
    if address is not None:
        env["TEMPORAL_ADDRESS"] = address
    return subprocess.Popen(
        [sys.executable, "-m", "controller.lifecycle.worker", "--task-queue", queue],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_the_worker_polls_runs_a_local_workflow_to_completion_and_stops_on_sigterm(
    temporal_address: str, tmp_path: Path
) -> None:
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE))
    root = tmp_path / "artifacts"
    queue = f"worker-test-{uuid.uuid4().hex}"
    run_id = new_run_id()
    worker = start_worker(temporal_address, queue)
    try:
        assert worker.stdout is not None
        polling = json.loads(worker.stdout.readline())
        assert polling == {"worker": "polling", "taskQueue": queue, "address": temporal_address}

        async def submit() -> dict[str, object]:
            client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
            request = RunRequest(module_path=str(module), run_id=run_id, artifact_root=str(root))
            return await asyncio.wait_for(  # type: ignore[no-any-return]
                client.execute_workflow(
                    "SocietyRun", request.model_dump(mode="json"), id=run_id, task_queue=queue
                ),
                timeout=120,
            )

        result = RunResult.model_validate(asyncio.run(submit()))
        assert (result.outcome, result.exit) == ("ProgramFinished", "success"), result.cause
        assert result.receipt.complete
        assert run_record(root, run_id)["controllerPid"] == worker.pid  # it ran the controller

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        assert json.loads(worker.stdout.readline()) == {"worker": "stopping", "taskQueue": queue}
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def test_without_temporal_address_the_worker_exits_2_and_says_what_to_set() -> None:
    worker = start_worker(None, "unused")
    _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 2
    assert "TEMPORAL_ADDRESS is not set" in stderr and "next step" in stderr
