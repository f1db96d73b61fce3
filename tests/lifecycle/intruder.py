"""Another local process that reaches a run's Temporal: the attacker in the submission tests.

Run as a script, in its own process, with nothing from the victim but what a local process can
read (the server's state file or address, the run id, what Temporal shows about the run):

- ``hijack STATE_FILE RUN_ID MODULE ROOT``: start ``SocietyRun`` on the live run's task queue
  three ways (a request naming MODULE, the same with a made-up proof, and a replay of the
  victim's own proven request under another workflow id); prints one JSON line per attempt with
  how the workflow ended.
- ``rogue ADDRESS QUEUE STOP_FILE``: poll the run's task queue through the raw gRPC API until
  STOP_FILE exists, and answer every task it gets with a forgery: a workflow task completes the
  workflow with a made-up ``RunResult``, an activity task completes with made-up values. Prints
  one JSON line per task it answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from temporalio.api.command.v1 import Command, CompleteWorkflowExecutionCommandAttributes
from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import CommandType, EventType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollActivityTaskQueueRequest,
    PollWorkflowTaskQueueRequest,
    RespondActivityTaskCompletedRequest,
    RespondWorkflowTaskCompletedRequest,
)
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter

from controller.run import RunRequest, RunResult
from controller.run.runid import new_run_id
from ledger.records import LedgerReceipt

NAMESPACE = "default"
FORGED_RECORDS = 424242


async def _client(address: str) -> Client:
    return await Client.connect(
        address, namespace=NAMESPACE, data_converter=pydantic_data_converter
    )


async def _victims_submission(client: Client, run_id: str) -> dict[str, Any]:
    """What Temporal shows anyone about the victim's workflow: its input, with its proof."""
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [document] = await client.data_converter.decode(payloads, [dict[str, Any]])
            assert isinstance(document, dict)
            return document
    raise AssertionError(f"no start event for {run_id}")


async def hijack(state_file: str, run_id: str, module: str, root: str) -> None:
    address = json.loads(await anyio.Path(state_file).read_text())["address"]
    client = await _client(address)
    queue = f"society-run-{run_id}"
    own = new_run_id()
    request = RunRequest(module_path=module, run_id=own, artifact_root=root).model_dump(mode="json")
    replay = {**await _victims_submission(client, run_id)}
    attempts = {
        "unproven": request,
        "made-up-proof": {**request, "run_id": new_run_id(), "proof": secrets.token_hex(32)},
        "replayed": replay,
    }
    for name, submission in attempts.items():
        workflow_id = new_run_id() if name == "replayed" else submission["run_id"]
        handle = await client.start_workflow(
            "SocietyRun", submission, id=workflow_id, task_queue=queue
        )
        try:
            result = await asyncio.wait_for(handle.result(), timeout=120)
            ending: dict[str, Any] = {"ended": "completed", "result": result}
        except WorkflowFailureError as failure:
            causes = []
            cause: BaseException | None = failure.cause
            while cause is not None:
                causes.append({"type": getattr(cause, "type", None), "message": str(cause)})
                cause = cause.__cause__
            ending = {"ended": "failed", "causes": causes}
        print(json.dumps({"attempt": name, "workflow": workflow_id, **ending}), flush=True)


def _forged_result(run_id: str) -> RunResult:
    """A well-formed result for ``run_id`` that no run produced; the rogue has no key to MAC it."""
    receipt = LedgerReceipt(
        ledger_dir="/forged/ledger",
        run_id=run_id,
        record_count=FORGED_RECORDS,
        head_digest="0" * 64,
        public_key="ed25519:forged",
        complete=True,
    )
    return RunResult(
        outcome="ProgramFinished",
        exit="success",
        run_id=run_id,
        ledger_dir="/forged/ledger",
        receipt=receipt,
        records=FORGED_RECORDS,
        public_key="ed25519:forged",
    )


async def _poll_workflows(client: Client, queue: str, run_id: str, stop: Path) -> None:
    service = client.workflow_service
    forged = Payloads(payloads=await client.data_converter.encode([_forged_result(run_id)]))
    while not await anyio.Path(stop).exists():
        task = await service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(
                namespace=NAMESPACE, task_queue=TaskQueue(name=queue), identity="rogue"
            ),
            timeout=timedelta(seconds=5),
        )
        if not task.task_token:
            continue
        complete = Command(
            command_type=CommandType.COMMAND_TYPE_COMPLETE_WORKFLOW_EXECUTION,
            complete_workflow_execution_command_attributes=(
                CompleteWorkflowExecutionCommandAttributes(result=forged)
            ),
        )
        await service.respond_workflow_task_completed(
            RespondWorkflowTaskCompletedRequest(
                task_token=task.task_token,
                commands=[complete],
                identity="rogue",
                namespace=NAMESPACE,
            )
        )
        print(json.dumps({"answered": "workflow-task", "forged": "RunResult"}), flush=True)


async def _poll_activities(client: Client, queue: str, run_id: str, stop: Path) -> None:
    service = client.workflow_service
    while not await anyio.Path(stop).exists():
        task = await service.poll_activity_task_queue(
            PollActivityTaskQueueRequest(
                namespace=NAMESPACE, task_queue=TaskQueue(name=queue), identity="rogue"
            ),
            timeout=timedelta(seconds=5),
        )
        if not task.task_token:
            continue
        name = task.activity_type.name
        value: Any = _forged_result(run_id)
        if name == "society.prepare":
            value = {"run_id": run_id, "namespace": run_id, "artifact_dir": "/forged"}
        elif name == "society.cleanup":
            value = None
        await service.respond_activity_task_completed(
            RespondActivityTaskCompletedRequest(
                task_token=task.task_token,
                result=Payloads(payloads=await client.data_converter.encode([value])),
                identity="rogue",
                namespace=NAMESPACE,
            )
        )
        print(json.dumps({"answered": "activity-task", "activity": name}), flush=True)


async def rogue(address: str, queue: str, stop_file: str) -> None:
    client = await _client(address)
    run_id = queue.removeprefix("society-run-")
    stop = Path(stop_file)
    print(json.dumps({"rogue": "polling", "taskQueue": queue}), flush=True)
    await asyncio.gather(
        _poll_workflows(client, queue, run_id, stop),
        _poll_activities(client, queue, run_id, stop),
    )


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "hijack":
        asyncio.run(hijack(*arguments))
    elif command == "rogue":
        asyncio.run(rogue(*arguments))
    else:
        sys.exit(f"unknown command {command!r}")
    sys.stdout.flush()
    os._exit(0)  # as `society` does: skip the Temporal SDK's native teardown, seen to crash
