"""Warm pools on the real-pod tests' kind cluster: Agent Sandbox's SandboxWarmPool keeps pods of
the scripted runtime's shape waiting; a run claims one per agent after Kueue admitted the roster,
tells each who it is over its bridge port, and the gate passes with the same evidence as cold.

The controller is this process (the out-of-cluster debugging mode, as in test_runs.py); the
pool's pods run the locally built image, pinned by digest."""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
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
    settings,
)
from k8s_run_support import (  # noqa: F401 (fixture)
    MODULE,
    echo,
    hear_everyone,
    run_society,
    temporal_address,
    verified,
)
from kind_plane import KindPlane
from rbac_support import WORKER, worker_rights  # noqa: F401 (fixture)
from test_controller_job import in_cluster_worker
from test_network_policy import _exec

from controller import Run, RunSpec
from controller.agents import scripted
from controller.events.run import AgentRuntimeReady, AgentWorkspaceFileHarvested
from controller.lifecycle.activities import LifecycleActivities
from controller.platforms.kubernetes import (
    Kube,
    KubernetesPlatform,
    delete_run_namespace,
    objects,
    warm,
)
from controller.platforms.kubernetes.kube import Informer, Obj
from controller.platforms.kubernetes.rbac import warm_binding_name
from controller.run import ProgramFinished, RunContext, RunRequest, RunResult, Success
from controller.run.module_source import ModuleSource
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

POOL_SIZE = 2
READY_S = 180.0


def agent() -> Any:
    return scripted(echo, image=SCRIPTED)


def spec_of(*names: str) -> RunSpec:
    return RunSpec.define(
        id="acme.k8s-warm/v1", agents={name: agent() for name in names}, execute=hear_everyone
    )


async def _ready(kube: Kube, name: str, replicas: int) -> None:
    """Until the pool holds ``replicas`` ready sandboxes."""
    with anyio.fail_after(READY_S):
        while True:
            found = await kube.get("SandboxWarmPool", name, warm.WARM_NAMESPACE)
            status = (found or {}).get("status") or {}
            if int(status.get("readyReplicas") or 0) >= replicas:
                return
            await anyio.sleep(0.5)


@pytest.fixture(scope="module")
async def made_pool(control_plane: KindPlane) -> AsyncIterator[str]:
    """A pool of ``POOL_SIZE`` scripted sandboxes, made as `cluster up --warm-pool` makes it."""
    platform = KubernetesPlatform(settings(control_plane))
    descriptor = platform.pinned(agent())
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        for manifest in warm.pool_manifests(descriptor, POOL_SIZE):
            await kube.apply(manifest)
        name = warm.pool_name(descriptor)
        await _ready(kube, name, POOL_SIZE)
        yield name
        await kube.delete("SandboxWarmPool", name, warm.WARM_NAMESPACE)


@pytest.fixture
async def pool(control_plane: KindPlane, made_pool: str) -> str:
    """The pool, full again (a test before may have taken from it)."""
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        await _ready(kube, made_pool, POOL_SIZE)
    return made_pool


async def _claims_of(kube: Kube, run_id: str) -> list[str]:
    found, _ = await kube.list(
        "SandboxClaim", warm.WARM_NAMESPACE, label_selector=objects.run_selector(run_id)
    )
    return [item["metadata"]["name"] for item in found]


async def test_a_roster_that_fits_the_pool_is_claimed_warm_and_passes_the_gate_with_full_evidence(
    control_plane: KindPlane, cluster_queue: str, pool: str, tmp_path: Path
) -> None:
    spec = spec_of("alice", "bob")
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path), seed=7
        )
        left = await left_in_cluster(kube, run_id)
        claims = await _claims_of(kube, run_id)
        await _ready(kube, pool, POOL_SIZE)  # the pool refills what the run took
    assert isinstance(outcome, ProgramFinished), outcome
    assert isinstance(outcome.exit, Success), outcome.exit
    assert outcome.exit.value == ["alice heard: say hello", "bob heard: say hello"]
    ledger = verified(spec, outcome)
    starts = {e.agent: e.sandbox_start for e in ledger.events(AgentRuntimeReady)}
    assert starts == {"alice": "warm", "bob": "warm"}
    # the declared file reached the claimed pod over its bridge port and was harvested from it
    harvested = {e.agent: e.outcome for e in ledger.events(AgentWorkspaceFileHarvested)}
    assert harvested == {"alice": "harvested", "bob": "harvested"}
    assert left == [] and claims == []


async def _running_ip(kube: Kube, selector: str, *, without: str | None = None) -> list[Obj]:
    found, _ = await kube.list("Pod", warm.WARM_NAMESPACE, label_selector=selector)
    return [
        pod
        for pod in found
        if pod.get("status", {}).get("podIP")
        and pod["status"].get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
        and (without is None or without not in (pod["metadata"].get("labels") or {}))
    ]


async def test_a_claimed_agent_reaches_neither_an_unclaimed_pool_pod_nor_another_agents_bridge(
    control_plane: KindPlane, cluster_queue: str, pool: str, tmp_path: Path
) -> None:
    """The attacker is alice's own program, in her claimed pod: she tries to provision a pool
    pod nobody claimed yet (to become someone, or to spoil it) and to talk to bob's bridge around
    the router. Both stay shut; the router, her one way out, answers (the probe's control)."""
    run_id = new_run_id()

    async def execute(ctx: RunContext) -> dict[str, bool]:
        async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
            claimed = await _running_ip(kube, objects.run_selector(run_id))
            with anyio.fail_after(120):  # the pool refills what the run took
                while True:
                    unclaimed = await _running_ip(
                        kube, f"{warm.POOL_LABEL}={pool}", without=objects.RUN_LABEL
                    )
                    if unclaimed:
                        break
                    await anyio.sleep(0.5)
            router = await kube.get("Service", objects.ROUTER_SERVICE, run_id)
        assert router is not None
        by_agent = {p["metadata"]["labels"][objects.AGENT_LABEL]: p for p in claimed}
        targets = {
            "unclaimed": f"{unclaimed[0]['status']['podIP']}:7400",
            "bob": f"{by_agent['bob']['status']['podIP']}:7400",
            "router": f"{router['spec']['clusterIP']}:{router['spec']['ports'][0]['port']}",
        }
        alice = by_agent["alice"]["metadata"]["name"]
        seen = await anyio.to_thread.run_sync(
            lambda: _exec(
                control_plane,
                warm.WARM_NAMESPACE,
                alice,
                list(targets.values()),
                container=objects.AGENT_CONTAINER,
            )
        )
        return {name: seen[target] for name, target in targets.items()}

    spec = RunSpec.define(
        id="acme.k8s-warm/v1", agents={"alice": agent(), "bob": agent()}, execute=execute
    )
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (platform, _, _):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path), seed=7
        )
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert outcome.exit.value == {"unclaimed": False, "bob": False, "router": True}


async def _pool_sandboxes(kube: Kube, pool: str) -> set[str]:
    found, _ = await kube.list(
        "Pod", warm.WARM_NAMESPACE, label_selector=f"{warm.POOL_LABEL}={pool}"
    )
    return {
        item["metadata"]["name"] for item in found if not item["metadata"].get("deletionTimestamp")
    }


async def test_a_roster_larger_than_the_pool_starts_cold_and_claims_nothing(
    control_plane: KindPlane, cluster_queue: str, pool: str, tmp_path: Path
) -> None:
    names = [f"a{i}" for i in range(POOL_SIZE + 1)]
    spec = spec_of(*names)
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _,
    ):
        before = await _pool_sandboxes(kube, pool)
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path), seed=7
        )
        after = await _pool_sandboxes(kube, pool)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    starts = {e.agent: e.sandbox_start for e in verified(spec, outcome).events(AgentRuntimeReady)}
    assert starts == dict.fromkeys(names, "cold")
    assert len(before) == POOL_SIZE and after == before  # not one of the pool's was taken


async def test_when_one_claim_fails_every_claim_is_let_go_and_the_whole_roster_starts_cold(
    control_plane: KindPlane, cluster_queue: str, pool: str, tmp_path: Path
) -> None:
    spec = spec_of("alice", "bob")
    run_id = new_run_id()
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as admin:
        # Something else holds bob's claim name: creating his claim is refused (409).
        squatter = warm.claim(run_id, "bob", "no-such-pool", shutdown_at=_soon())
        squatter["metadata"]["labels"] = {"acme.test/role": "squatter"}
        await admin.create(squatter)
        try:
            async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
                platform,
                kube,
                _,
            ):
                outcome = await Run.execute(
                    spec,
                    platform=platform,
                    run_id=run_id,
                    artifact_root=artifacts(tmp_path),
                    seed=7,
                )
                claims = await _claims_of(kube, run_id)
                await _ready(kube, pool, POOL_SIZE)
            squatter_left = await admin.get(
                "SandboxClaim", squatter["metadata"]["name"], warm.WARM_NAMESPACE
            )
        finally:
            await admin.delete("SandboxClaim", squatter["metadata"]["name"], warm.WARM_NAMESPACE)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    starts = {e.agent: e.sandbox_start for e in verified(spec, outcome).events(AgentRuntimeReady)}
    assert starts == {"alice": "cold", "bob": "cold"}
    assert claims == []  # alice's claim, which bound, was let go too
    assert squatter_left is not None  # and what the run did not make was not its to delete


async def test_an_in_cluster_controller_claims_warm_sandboxes_with_the_rights_its_run_was_given(
    control_plane: KindPlane,
    worker_rights: str,
    cluster_queue: str,
    temporal_address: str,
    pool: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run worker (as its ServiceAccount, under the chart's RBAC) prepares the run, which
    binds the run's controller in the warm namespace; the controller, the run's Job with its own
    token, claims both agents' sandboxes from the pool and its router reaches them through the
    network policies; cleanup unbinds it."""
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=SCRIPTED)))
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_IMPERSONATE", WORKER)
    outcomes: dict[str, Any] = {}
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as admin:
        claims = Informer(
            admin, "SandboxClaim", warm.WARM_NAMESPACE, label_selector=objects.run_selector(run_id)
        )

        def note(informer: Informer) -> None:
            for claim in informer.objects.values():
                agent = claim["metadata"]["labels"][objects.AGENT_LABEL]
                outcomes[agent] = warm.claim_outcome(claim) or outcomes.get(agent)

        activities = LifecycleActivities()
        request = RunRequest(
            module_path=str(module),
            module_source=ModuleSource.read(module),
            run_id=run_id,
            profile="kubernetes",
            artifact_root=str(artifacts(tmp_path)),
        )
        async with anyio.create_task_group() as watching:
            watching.start_soon(claims.run)
            watching.start_soon(claims.until, note)
            result = await run_society(temporal_address, request, activities, activities.execute)
            watching.cancel_scope.cancel()
        left = await left_in_cluster(admin, run_id)
        binding = warm_binding_name(run_id)
        binding_left = await admin.get("RoleBinding", binding, warm.WARM_NAMESPACE)
    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    assert sorted(outcomes) == ["alice", "bob"]
    assert all(isinstance(o, warm.Claimed) and o.warm for o in outcomes.values()), outcomes
    assert binding_left is None and left == []


async def test_cleanup_releases_the_claims_a_killed_controller_left_and_the_pool_refills(
    control_plane: KindPlane, pool: str
) -> None:
    run_id = new_run_id()
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        for agent in ("alice", "bob"):  # as a controller killed after claiming would leave them
            await kube.create(warm.claim(run_id, agent, pool, shutdown_at=_soon()))
        with anyio.fail_after(60):  # both hold one of the pool's sandboxes
            while True:
                found, _ = await kube.list(
                    "SandboxClaim", warm.WARM_NAMESPACE, label_selector=objects.run_selector(run_id)
                )
                bound = [c for c in found if isinstance(warm.claim_outcome(c), warm.Claimed)]
                if len(bound) == 2:
                    break
                await anyio.sleep(0.2)
        await delete_run_namespace(kube, run_id)
        left = await _claims_of(kube, run_id)
        await _ready(kube, pool, POOL_SIZE)
    assert left == []


def _soon() -> Any:
    import datetime

    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=10)
