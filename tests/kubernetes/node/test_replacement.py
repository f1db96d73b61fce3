"""The restart rule on kind: before dispatch a replacement pod (Agent Sandbox re-creates
a deleted one) stays out of the readiness gate until its new application is ready; the run then
dispatches with it. After dispatch a lost pod is evidence (``test_runs.py``: a killed container).

The window before dispatch is the roster's own: ``slowpoke`` boots ten seconds late, so the gate
is still waiting for it when ``alice``, ready first, loses her pod.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import dataclasses
from pathlib import Path

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
from controller.agents import scripted
from controller.events.run import (
    AgentProcessExited,
    AgentProcessSignaled,
    AgentRuntimeCompleted,
    AgentRuntimeFailed,
    AgentRuntimeReady,
    ReadinessGateFailed,
    ReadinessGatePassed,
)
from controller.run import ProgramFinished, RunContext, Success
from controller.run.progress import Counter
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LATE_S = 10
SLOW_BOOT = (
    "python",
    "-c",
    f"import runpy, time; time.sleep({LATE_S}); "
    "runpy.run_module('agent_images.scripted', run_name='__main__')",
)
"""The scripted agent, started ``LATE_S`` seconds late (an agent that is slow to boot)."""

TERMINATIONS = (AgentRuntimeCompleted, AgentRuntimeFailed, AgentProcessSignaled, AgentProcessExited)


class FirstReady:
    """A ``Progress`` (what the CLI renders) that tells the test when the first agent is ready."""

    def __init__(self) -> None:
        self.ready = anyio.Event()

    def phase(self, text: str) -> None:
        return None

    def program_started(self, ledger_dir: Path) -> None:
        return None

    def counter(self, label: str, total: int) -> Counter:
        event = self.ready if label == "agents ready" else anyio.Event()

        class Count:
            def advance(self, n: int = 1) -> None:
                event.set()

            def close(self) -> None:
                return None

        return Count()


async def test_a_pod_deleted_before_dispatch_is_replaced_and_the_run_dispatches_with_it(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    """Alice's pod is deleted while the gate waits for slowpoke: the gate takes her out until
    her replacement's bridge attached and its router session authenticated, and the program
    hears from the new alice. Before the rule this failed the gate (``exited-before-dispatch``)."""
    run_id = new_run_id()
    lost: dict[str, str] = {}
    serving: dict[str, str] = {}

    async def execute(ctx: RunContext) -> list[str]:
        pods, _ = await kube.list("Pod", run_id)
        serving.update({p["metadata"]["name"]: p["metadata"]["uid"] for p in pods})
        return await hear_everyone(ctx)

    slowpoke = dataclasses.replace(scripted(echo, image=SCRIPTED), command=SLOW_BOOT)
    spec = RunSpec.define(
        id="acme.k8s-test/v1",
        agents={"alice": scripted(echo, image=SCRIPTED), "slowpoke": slowpoke},
        execute=execute,
    )
    progress = FirstReady()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):

        async def delete_alices_pod() -> None:  # what an administrator's `kubectl delete` does
            await progress.ready.wait()
            pod = await kube.get("Pod", "alice", run_id)
            assert pod is not None
            lost["alice"] = pod["metadata"]["uid"]
            await kube.delete("Pod", "alice", run_id)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(delete_alices_pod)
            with anyio.fail_after(150):
                outcome = await Run.execute(
                    spec,
                    platform=platform,
                    run_id=run_id,
                    artifact_root=artifacts(tmp_path),
                    progress=progress,
                )
            tasks.cancel_scope.cancel()
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished), outcome
    assert outcome.exit == Success(["alice heard: say hello", "slowpoke heard: say hello"])
    assert "alice" in lost and serving["alice"] != lost["alice"], (lost, serving)
    ledger = verified(spec, outcome)
    assert list(ledger.events(ReadinessGateFailed)) == []
    story = [
        (type(r.event).__name__, getattr(r.event, "phase", None))
        for r in ledger
        if getattr(r.event, "agent", None) == "alice" or isinstance(r.event, ReadinessGatePassed)
    ]
    ready = ("AgentRuntimeReady", None)
    ended = next(s for s in story if s[0] in {t.__name__ for t in TERMINATIONS})
    # ready, lost before dispatch (recorded, phase startup), ready again, then the gate
    assert story[:4] == [ready, (ended[0], "startup"), ready, ("ReadinessGatePassed", None)], story
    readies = [e for e in ledger.events(AgentRuntimeReady) if e.agent == "slowpoke"]
    assert len(readies) == 1
    assert left == []
