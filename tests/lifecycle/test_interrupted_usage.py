"""An interrupted or cancelled run's result line carries the model usage its ledger records.

End to end: ``society run`` of two llm agents on the scripted fake provider (a paid provider
cannot run here), interrupted after their calls were recorded. Then the reading alone: a ledger
written by the real ``LedgerWriter`` with the model gateway's own events and left incomplete,
read from disk as ``society run`` and ``society cancel`` read a run that returned no result."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest
from lifecycle_support import PROGRAMS, SocietyCommand, wait_until

from controller.lifecycle.driver import RunReport
from controller.modelgateway.events import (
    AgentModelCallFailed,
    AgentModelUsage,
    ModelGatewayStarted,
    ServedProvider,
    model_gateway_catalog,
)
from controller.run.runid import new_run_id
from ledger.format import Provenance, ledger_directory
from ledger.writer import open_ledger_writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "modelgateway"))
from fake_provider import FakeProviderServer


def _usage(agent: str, prompt: int, completion: int) -> AgentModelUsage:
    return AgentModelUsage(
        agent=agent,
        provider="local",
        model="smollm2",
        prompt_tokens=prompt,
        completion_tokens=completion,
        latency_ms=3.0,
        cost_usd=0.0,
        attempts=1,
    )


async def _interrupted_ledger(root: Path, run_id: str) -> None:
    async with open_ledger_writer(
        ledger_directory(root, run_id, "main"),
        catalog=model_gateway_catalog,
        definition_id="usage-test",
        run_id=run_id,
        provenance=Provenance.current("local"),
    ) as writer:
        started = ModelGatewayStarted(
            providers=[
                ServedProvider(
                    name="local",
                    model="smollm2",
                    base_url="http://127.0.0.1:1/v1",
                    api_key_name="K",
                    local=True,
                )
            ],
            agents={"ann": "smollm2", "ben": "smollm2", "cy": "smollm2"},
        )
        await writer.append(started, producer="model-gateway")
        await writer.append(_usage("ann", 10, 5), producer="model-gateway")
        await writer.append(_usage("ann", 7, 3), producer="model-gateway")
        await writer.append(_usage("ben", 4, 2), producer="model-gateway")
        failed = AgentModelCallFailed(
            agent="ben",
            provider="local",
            model="smollm2",
            error_class="auth",
            status=401,
            detail="refused",
            ends_model_use=True,
            latency_ms=1.0,
            attempts=1,
        )
        await writer.append(failed, producer="model-gateway")
        # no complete(): the run was interrupted before finalization finished


@pytest.mark.parametrize("outcome", ["Interrupted", "PlatformLost"])
def test_a_stopped_runs_line_carries_the_usage_its_ledger_records(
    tmp_path: Path, outcome: str
) -> None:
    run_id = new_run_id()
    anyio.run(_interrupted_ledger, tmp_path, run_id)
    line = RunReport.from_artifacts(tmp_path, run_id, outcome).line()  # type: ignore[arg-type]
    usage = line["usage"]
    assert usage is not None
    assert usage["total"]["calls"] == 4
    assert usage["total"]["promptTokens"] == 21 and usage["total"]["completionTokens"] == 10
    assert usage["agents"]["ann"]["calls"] == 2 and usage["agents"]["ann"]["promptTokens"] == 17
    assert usage["agents"]["ben"]["failedCalls"] == 1
    assert usage["agents"]["ben"]["endedBy"] == "auth"
    assert usage["agents"]["cy"]["calls"] == 0


def test_a_run_without_a_model_gateway_reports_no_usage(tmp_path: Path) -> None:
    run_id = new_run_id()
    assert RunReport.from_artifacts(tmp_path, run_id, "Interrupted").line()["usage"] is None


@pytest.mark.slow
def test_an_interrupted_llm_run_prints_the_usage_its_ledger_holds(
    society: SocietyCommand,
) -> None:
    with FakeProviderServer() as provider:
        society.env["LIFECYCLE_FAKE_PROVIDER_URL"] = provider.base_url
        society.env["ACME_LLM_API_KEY"] = "sk-acme-test"
        society.env["SOCIETY_CREDENTIALS"] = "ACME_LLM_API_KEY"  # the operator allows both
        society.env["SOCIETY_PROVIDER_URLS"] = provider.base_url
        run = society.run(PROGRAMS / "llm_endless.py")
        run.wait_for_stderr("running program")
        records = society.artifacts.glob
        assert wait_until(
            lambda: any(
                b"lifecycle-test.llm-tick/v1" in path.read_bytes()
                for path in records("sr-*/ledger/main/records.ndjson")
            ),
            90,
        ), run.stderr  # alice took her turn: her call is recorded, the program ticks
        run.interrupt(signal.SIGINT)
        assert run.finish() == 130, run.stderr
    result = run.result()
    assert result["outcome"] == "Interrupted"
    usage = result["usage"]
    assert isinstance(usage, dict), result
    assert usage["total"]["calls"] >= 1
    assert usage["agents"]["alice"]["calls"] >= 1
    assert usage["total"]["promptTokens"] > 0
