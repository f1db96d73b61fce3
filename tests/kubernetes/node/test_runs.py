"""Whole runs on the kubernetes platform against the real-pod tests' kind cluster.

Kueue admits, Agent Sandbox creates the pods, the node runs them from the locally built image
(pinned by digest through the image map). The controller is this process, which the pods reach
at the gateway of the cluster's podman network (the out-of-cluster debugging mode), so the
readiness gate's bridge and router session, exec harvest and pod logs are all real."""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    SCRIPTED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from k8s_run_support import echo, hear_everyone, verified
from kind_plane import KindPlane

from controller import Run, RunSpec
from controller.agents import Resources, scripted
from controller.agents.termination import Signaled
from controller.events.run import (
    AgentRuntimeArtifact,
    AgentRuntimeReady,
    AgentWorkspaceFileHarvested,
    PlatformFailed,
    ProgramInterrupted,
    ReadinessGateFailed,
    ReadinessGatePassed,
    RosterAdmitted,
)
from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes.kube import KINDS, Informer
from controller.run import PlatformLost, ProgramFinished, RunContext, Success
from controller.run.runid import new_run_id
from ledger import open_ledger_artifacts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def agent(**changes: Any) -> Any:
    return scripted(echo, image=SCRIPTED, **changes)


def spec_of(execute: Any, **agents: Any) -> RunSpec:
    return RunSpec.define(
        id="acme.k8s-test/v1",
        agents=agents or {"alice": agent(), "bob": agent()},
        execute=execute,
    )


async def test_the_roster_is_admitted_whole_then_every_sandbox_becomes_ready_and_execute_runs_once(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    bigger = Resources(cpu=0.05, memory_mib=96, memory_limit_mib=1536)
    spec = spec_of(hear_everyone, alice=agent(), bob=agent(), carol=agent(resources=bigger))
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        record,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path), seed=5
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished), outcome
    assert isinstance(outcome.exit, Success), outcome.exit
    assert outcome.exit.value == [f"{n} heard: say hello" for n in ("alice", "bob", "carol")]
    ledger = verified(spec, outcome)
    admitted = next(iter(ledger.events(RosterAdmitted)))
    assert admitted.queue is not None and admitted.queue.cluster_queue == cluster_queue
    assert sorted((s.count, tuple(s.agents)) for s in admitted.queue.pod_sets) == [
        (1, ("carol",)),
        (2, ("alice", "bob")),
    ]
    ready = {e.agent for e in ledger.events(AgentRuntimeReady)}
    assert ready == {"alice", "bob", "carol"}
    assert len(list(ledger.events(ReadinessGatePassed))) == 1
    # Kueue admitted the whole roster before the first Sandbox existed
    first_admitted, sandboxes = record.first("admitted"), record.all("sandbox")
    assert first_admitted is not None and len(sandboxes) == 3
    assert first_admitted <= min(sandboxes)
    assert left == []  # the session deleted the namespace and waited until it was gone
    # exec harvest: each declared workspace file was read from the pod, copied and hashed
    harvested = {e.agent: e for e in ledger.events(AgentWorkspaceFileHarvested)}
    assert sorted(harvested) == ["alice", "bob", "carol"]
    root = Path(outcome.receipt.ledger_dir).parents[1]
    for event in harvested.values():
        assert (event.path, event.outcome) == ("policy.json", "harvested"), event
        assert event.artifact is not None and event.sha256 is not None
        copy = root / event.artifact
        assert json.loads(copy.read_bytes())  # the scripted policy the agent ran with
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == event.sha256
    # pod logs harvest: each agent's container log came back through the API
    logs = {e.agent: e for e in ledger.events(AgentRuntimeArtifact)}
    assert sorted(logs) == ["alice", "bob", "carol"], logs
    assert all(e.outcome == "harvested" for e in logs.values()), logs


async def test_eviction_of_the_workload_mid_run_ends_it_as_platform_lost_with_a_complete_receipt(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    run_id = new_run_id()
    evicted = anyio.Event()

    async def execute(ctx: RunContext) -> None:
        await kube._request(  # what an administrator's `kubectl patch` would do
            "PATCH",
            KINDS["Workload"].path(run_id, objects.WORKLOAD),
            body={"spec": {"active": False}},
            content_type="application/merge-patch+json",
        )
        evicted.set()
        await anyio.sleep(120)  # the eviction ends the program

    spec = spec_of(execute)
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):
        with anyio.fail_after(100):
            outcome = await Run.execute(
                spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
            )
        left = await left_in_cluster(kube, run_id)
    assert evicted.is_set()
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "workload-evicted", outcome.cause
    ledger = verified(spec, outcome)
    assert [e.reason for e in ledger.events(PlatformFailed)] == ["workload-evicted"]
    assert left == []


async def test_cleanup_deletes_the_namespace_after_a_failing_program(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise RuntimeError("the experiment broke")

    spec = spec_of(execute)
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished) and not outcome.succeeded
    verified(spec, outcome)
    assert left == []


async def test_cleanup_deletes_the_namespace_after_cancellation(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    started = anyio.Event()

    async def execute(ctx: RunContext) -> None:
        started.set()
        await anyio.sleep(120)

    spec = spec_of(execute)
    run_id = new_run_id()
    root = artifacts(tmp_path)
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):
        with anyio.fail_after(100):
            async with anyio.create_task_group() as tasks:

                async def run() -> None:
                    await Run.execute(spec, platform=platform, run_id=run_id, artifact_root=root)

                tasks.start_soon(run)
                await started.wait()
                tasks.cancel_scope.cancel()
        left = await left_in_cluster(kube, run_id)
    ledger = open_ledger_artifacts(spec.catalog, root / run_id / "ledger" / "main")
    assert [e.reason for e in ledger.events(ProgramInterrupted)] == ["cancelled"]
    assert left == []


ROSTER = 8
"""Real pods on a 2-core machine: the roster at scale (50 and more) is KWOK's, for admission."""


async def test_a_roster_in_one_pod_set_is_admitted_and_becomes_ready(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    async def execute(ctx: RunContext) -> int:
        return len(ctx.agents)

    roster = {f"agent-{index:02d}": agent() for index in range(ROSTER)}
    spec = spec_of(execute, **roster)
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        record,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished) and outcome.exit == Success(ROSTER), outcome
    ledger = verified(spec, outcome)
    assert len({e.agent for e in ledger.events(AgentRuntimeReady)}) == ROSTER
    admitted = next(iter(ledger.events(RosterAdmitted)))
    assert admitted.queue is not None and [s.count for s in admitted.queue.pod_sets] == [ROSTER]
    first_admitted = record.first("admitted")
    assert first_admitted is not None and first_admitted <= min(record.all("sandbox"))
    assert left == []


@pytest.mark.parametrize("how", ["its program exits", "its Sandbox is deleted"])
async def test_a_sandbox_that_finishes_before_dispatch_fails_the_gate_and_execute_never_runs(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path, how: str
) -> None:
    ran: list[str] = []

    async def execute(ctx: RunContext) -> None:
        ran.append("execute")

    quitter = agent()
    if how == "its program exits":
        quitter = dataclasses.replace(quitter, command=("python", "-c", "raise SystemExit(3)"))
    spec = spec_of(execute, alice=agent(), bob=agent(), quitter=quitter)
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):

        async def delete_on_sight() -> None:  # what an administrator's `kubectl delete` does
            await sandboxes.until(lambda seen: seen.objects.get("quitter"))
            await kube.delete("Sandbox", "quitter", run_id)

        sandboxes = Informer(kube, "Sandbox", run_id)
        async with anyio.create_task_group() as tasks:
            if how == "its Sandbox is deleted":
                tasks.start_soon(sandboxes.run)
                tasks.start_soon(delete_on_sight)
            with anyio.fail_after(100):
                outcome = await Run.execute(
                    spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
                )
            tasks.cancel_scope.cancel()
        left = await left_in_cluster(kube, run_id)
    assert ran == []
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "readiness-gate-failed", outcome.cause
    ledger = verified(spec, outcome)
    failed = next(iter(ledger.events(ReadinessGateFailed)))
    assert failed.failed[0] == "quitter" and "quitter" not in failed.ready
    assert list(ledger.events(ReadinessGatePassed)) == []
    assert left == []


async def test_an_image_that_cannot_be_pulled_ends_the_run_platform_lost_naming_the_image(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    ran: list[str] = []

    async def execute(ctx: RunContext) -> None:
        ran.append("execute")

    missing = "localhost/society/missing@sha256:" + "0" * 64  # pinned; no registry serves it
    spec = spec_of(execute, alice=agent(), ghost=scripted(echo, image=missing))
    run_id = new_run_id()
    async with on_cluster(
        control_plane, run_id, cluster_queue=cluster_queue, startup_timeout_s=120.0
    ) as (platform, kube, _record):
        with anyio.fail_after(100):  # well before the startup timeout: the cause is named
            outcome = await Run.execute(
                spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
            )
        left = await left_in_cluster(kube, run_id)
    assert ran == []
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "readiness-gate-failed", outcome.cause
    assert "ghost" in outcome.cause.detail and missing in outcome.cause.detail, outcome.cause
    assert "ImagePullBackOff" in outcome.cause.detail, outcome.cause
    ledger = verified(spec, outcome)
    failed = next(iter(ledger.events(ReadinessGateFailed)))
    assert failed.reason == "image-unpullable" and failed.failed[0] == "ghost"
    assert left == []


async def test_an_agent_container_killed_mid_run_is_evidence_and_the_program_goes_on(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    """SIGKILL to alice's process from the node (what the kernel's OOM killer sends): her
    termination is recorded as the signal, and the program, still running, hears from bob."""
    node = control_plane.node
    assert node is not None
    run_id = new_run_id()
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> list[str]:
        pods, _ = await kube.list("Pod", run_id, label_selector=f"{objects.AGENT_LABEL}=alice")
        statuses = pods[0]["status"]["containerStatuses"]
        agent = next(s for s in statuses if s["name"] == objects.AGENT_CONTAINER)
        container = str(agent["containerID"]).split("://", 1)[1]
        await anyio.to_thread.run_sync(node.ctr, "tasks", "kill", "--signal", "SIGKILL", container)
        with anyio.fail_after(60):
            seen["alice"] = await ctx.agents.alice.termination
        async with ctx.network.endpoint("workload") as workload:
            chat = await workload.open(ctx.agents.bob.agent)
            await chat.send("say still here")
            with anyio.fail_after(30):
                async for message in workload.messages():
                    return [message.text]
        return []

    spec = spec_of(execute)
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished), outcome
    assert outcome.exit == Success(["bob heard: say still here"]), outcome.exit
    assert isinstance(seen["alice"], Signaled) and seen["alice"].signal == 9, seen
    verified(spec, outcome)
    assert left == []
