"""``SocietyRun`` itself, on a real dev server: deterministic imports, at most one execute
attempt, and a cleanup that runs to its end on every path.

The activities here are stand-ins registered under the real names, so each path can be
provoked exactly; the run-command tests drive the same workflow with the real kernel.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from controller.lifecycle.models import LedgerExported, RunReservation
from controller.lifecycle.workflow import CLEANUP, EXECUTE, PREPARE, SocietyRun


def test_the_workflow_module_imports_no_kernel_platform_or_ledger() -> None:
    probe = (
        "import sys\nimport controller.lifecycle.workflow\nprint('\\n'.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    forbidden = (
        "controller.run",
        "controller.platforms",
        "controller.network",
        "ledger",
    )
    assert [name for name in loaded if name.startswith(forbidden)] == []


class StandIns:
    def __init__(
        self,
        *,
        execute_fails: bool = False,
        cleanup_s: float = 0.0,
        exported: LedgerExported | None = None,
    ) -> None:
        self.calls: list[str] = []
        self.cleanup_started = asyncio.Event()
        self._execute_fails = execute_fails
        self._cleanup_s = cleanup_s
        self._exported = exported

    @activity.defn(name=PREPARE)
    async def prepare(self, request: dict[str, Any]) -> RunReservation:
        self.calls.append("prepare")
        return RunReservation(run_id="r", namespace="r", artifact_dir="/nonexistent/r")

    @activity.defn(name=EXECUTE)
    async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("execute")
        if self._execute_fails:
            raise ApplicationError("the controller broke")
        return {"outcome": "ProgramFinished"}

    @activity.defn(name=CLEANUP)
    async def cleanup(self, reservation: RunReservation) -> LedgerExported | None:
        self.calls.append("cleanup")
        self.cleanup_started.set()
        for _ in range(int(self._cleanup_s * 20)):
            activity.heartbeat()
            await asyncio.sleep(0.05)
        self.calls.append("cleanup done")
        return self._exported


async def _drive(address: str, stand_ins: StandIns, *, cancel_in_cleanup: bool) -> Any:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    queue = f"workflow-test-{uuid.uuid4().hex}"
    activities = [stand_ins.prepare, stand_ins.execute, stand_ins.cleanup]
    async with Worker(client, task_queue=queue, workflows=[SocietyRun], activities=activities):
        handle = await client.start_workflow(
            SocietyRun.run, {}, id=f"sr-{uuid.uuid4().hex}", task_queue=queue
        )
        if cancel_in_cleanup:
            await stand_ins.cleanup_started.wait()
            await handle.cancel()
        try:
            return await handle.result()
        except WorkflowFailureError as error:
            return error.cause


def test_a_failing_execute_is_attempted_once_and_cleanup_still_runs(
    temporal_address: str,
) -> None:
    stand_ins = StandIns(execute_fails=True)
    cause = asyncio.run(_drive(temporal_address, stand_ins, cancel_in_cleanup=False))
    assert isinstance(cause, ActivityError) and cause.activity_type == EXECUTE
    assert stand_ins.calls == ["prepare", "execute", "cleanup", "cleanup done"]


@pytest.mark.slow
def test_a_cancel_that_arrives_during_cleanup_lets_cleanup_finish(temporal_address: str) -> None:
    stand_ins = StandIns(cleanup_s=1.5)
    cause = asyncio.run(_drive(temporal_address, stand_ins, cancel_in_cleanup=True))
    assert type(cause).__name__ == "CancelledError", "the workflow still ends cancelled"
    assert stand_ins.calls == ["prepare", "execute", "cleanup", "cleanup done"]


def test_the_result_says_where_cleanup_exported_the_run_and_nothing_when_it_did_not(
    temporal_address: str,
) -> None:
    exported = LedgerExported(
        url="gs://b/r/", ledger="gs://b/r/ledger/main", complete=True, signed_records=7,
        objects=9, skipped=0,
    )  # fmt: skip
    result = asyncio.run(
        _drive(temporal_address, StandIns(exported=exported), cancel_in_cleanup=False)
    )
    assert result == {"outcome": "ProgramFinished", "export": exported.model_dump(mode="json")}
    plain = asyncio.run(_drive(temporal_address, StandIns(), cancel_in_cleanup=False))
    assert plain == {"outcome": "ProgramFinished"}
