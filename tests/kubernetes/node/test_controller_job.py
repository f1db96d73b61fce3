"""In-cluster execution: the run worker's ``execute`` runs the controller as the run's Job, in a
pod on kind, from the controller image built here (pinned by digest through the image map).

The real ``SocietyRun`` on a dev server, with the worker in in-cluster mode against the real
control plane: prepare makes the namespace, execute creates the RunSpec ConfigMap and
``Job/society-controller`` and watches it, the controller (``incluster.run_controller``) runs as
the Job's pod on the node, creates the Sandboxes, whose pods reach its router through the run's
Service, reports its ``RunResult`` in its termination message, and cleanup deletes the namespace.
Nothing is substituted: the Job's pod and the agents' pods are containers.
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
)
from k8s_run_support import MODULE, run_society, temporal_address  # noqa: F401 (fixture)
from kind_plane import KindPlane
from temporalio import activity

from controller.events.run import ProgramInterrupted
from controller.incluster.access import ARTIFACT_ROOT, CONTROLLER_JOB
from controller.incluster.controller_job import run_controller_job
from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.workflow import EXECUTE
from controller.platforms.kubernetes import (
    Kube,
    KubernetesSettings,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
)
from controller.platforms.kubernetes.kube import Informer, Obj
from controller.run import RunRequest, RunResult
from controller.run.module_source import ModuleSource
from controller.run.runid import new_run_id
from controller.run.spec import load_run_spec
from ledger import open_ledger_artifacts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WRITER_HUNT = """

_program = run_spec.execute


async def _hunt(ctx):
    import gc

    wanted = {"LedgerWriter", "Router", "SignerSocket", "SignerProcess", "KubernetesPlatform"}
    found = sorted({type(o).__name__ for o in gc.get_objects()} & wanted)
    if found:
        raise RuntimeError(f"the module's process holds the controller's {found}")
    return await _program(ctx)


run_spec = RunSpec.define(
    id=run_spec.id, agents=dict(run_spec.agents), events=[run_spec.events], execute=_hunt
)
"""
"""Appended to a module: its program first looks for the controller's objects in its process,
and fails the run if it finds one."""
IMPORT_MARK = """
import os as _os

try:
    with open({mark!r}, "w") as _mark:
        _mark.write(str(_os.getpid()))
except OSError:
    pass
"""


def in_cluster_worker(
    monkeypatch: pytest.MonkeyPatch, plane: KindPlane, cluster_queue: str
) -> None:
    """The run worker's environment: this cluster, worker-owned namespaces, the image map; the
    controller runs as the run's Job (the default)."""
    assert plane.images is not None
    monkeypatch.setenv("SOCIETY_KUBECONFIG", str(plane.kubeconfig))
    monkeypatch.setenv("SOCIETY_CLUSTER_QUEUE", cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_WORKER_NAMESPACES", "1")
    monkeypatch.setenv("SOCIETY_IMAGE_MAP", str(plane.images.path))
    monkeypatch.setenv("SOCIETY_STARTUP_TIMEOUT_S", "90")
    monkeypatch.setenv("SOCIETY_ADMISSION_TIMEOUT_S", "60")
    for name in ("SOCIETY_CONTROLLER_JOB", "SOCIETY_ROUTER_ADDRESS", "SOCIETY_CONTROLLER_IMAGE"):
        monkeypatch.delenv(name, raising=False)


async def controller_pods(kube: Kube, run_id: str, seen: dict[str, Obj]) -> None:
    """Record every controller pod of the run (name -> last seen object) until cancelled."""
    informer = Informer(kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=controller")

    def note(i: Informer) -> None:
        seen.update(i.objects)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(informer.run)
        await informer.until(note)


@contextmanager
def retained_volume(
    plane: KindPlane, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Callable[[], str]]]:
    """``SOCIETY_LEDGER_PVC`` on a StorageClass with ``reclaimPolicy: Retain`` and a statically
    provisioned volume (a directory on the node: the harness runs no provisioner); yields the
    directory and the volume's phase."""
    from kubernetes import client

    assert plane.workdir is not None
    suffix = run_id[-10:]
    storage_class, volume = f"ledger-{suffix}", f"ledger-{suffix}"
    directory = plane.workdir / "volumes" / volume
    directory.mkdir(parents=True)
    os.chown(directory, objects.NON_ROOT_ID, objects.NON_ROOT_ID)  # hostPath: no fsGroup
    monkeypatch.setenv("SOCIETY_LEDGER_PVC", "ledger")
    monkeypatch.setenv("SOCIETY_LEDGER_STORAGE_CLASS", storage_class)
    api = plane.api_client()
    storage, core = client.StorageV1Api(api), client.CoreV1Api(api)
    storage.create_storage_class(
        {
            "metadata": {"name": storage_class},
            "provisioner": "kubernetes.io/no-provisioner",
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate",
        }
    )
    core.create_persistent_volume(
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": storage_class,
                "hostPath": {"path": str(directory), "type": "Directory"},
            },
        }
    )
    try:
        yield directory, lambda: str(core.read_persistent_volume(volume).status.phase)
    finally:
        core.delete_persistent_volume(volume)
        storage.delete_storage_class(storage_class)


async def test_society_run_in_cluster_runs_the_controller_as_a_job_and_returns_its_result(
    control_plane: KindPlane,
    cluster_queue: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert control_plane.images is not None and control_plane.node is not None
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    imported_here = tmp_path / "imported-by-the-worker"
    # The module's top level plays a hostile author: imported by the run worker (which holds the
    # operator key and the rights to create runs' objects), it would leave this file; in the
    # controller's pod, where it belongs, the worker's paths do not exist. Its program looks for
    # the ledger writer, the router and the signer in its process (they are the controller's).
    module.write_text(
        textwrap.dedent(MODULE.format(image=SCRIPTED))
        + WRITER_HUNT
        + IMPORT_MARK.format(mark=str(imported_here))
    )
    root = artifacts(tmp_path)
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    seen: dict[str, Any] = {}
    pods: dict[str, Obj] = {}

    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        activities = LifecycleActivities()

        @activity.defn(name=EXECUTE)
        async def execute(request: RunRequest) -> RunResult:
            result = await activities.execute(request)
            for name in pods:  # the controller's own account of the run, for a failure's message
                seen["log"] = await kube.log(name, run_id, container="controller", limit_bytes=8000)
            seen["job"] = await kube.get("Job", CONTROLLER_JOB, run_id)
            seen["runspec"] = await kube.get("ConfigMap", "society-runspec", run_id)
            return result

        request = RunRequest(
            module_path=str(module),
            module_source=ModuleSource.read(module),  # a cluster's worker reads no local path
            run_id=run_id,
            profile="kubernetes",
            artifact_root=str(root),
        )
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(controller_pods, kube, run_id, pods)
            result = await run_society(temporal_address, request, activities, execute)
            tasks.cancel_scope.cancel()
        left = await left_in_cluster(kube, run_id)

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", (
        f"{outcome.cause}\ncontroller log:\n{seen.get('log', b'').decode(errors='replace')}"
    )
    job = seen["job"]
    assert job["spec"]["backoffLimit"] == 0
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == control_plane.images.ref("controller")
    assert seen["runspec"]["immutable"] is True
    assert seen["runspec"]["data"]["experiment.py"] == module.read_text()
    # the Job ran once: one pod, on kind, whose container exited 0
    assert len(pods) == 1, sorted(pods)
    pod = next(iter(pods.values()))
    assert pod["spec"]["nodeName"] == control_plane.node.name
    terminated = pod["status"]["containerStatuses"][0]["state"].get("terminated") or {}
    assert terminated.get("exitCode") == 0, pod["status"]
    assert outcome.receipt.complete
    # the module ran in the controller's pod only: the worker never imported it
    assert not imported_here.exists(), imported_here.read_text()
    # cleanup deleted the namespace (and with it the Job) before the workflow returned
    assert left == []


async def test_a_controller_job_that_dies_before_reporting_ends_the_run_platform_lost(
    control_plane: KindPlane,
    cluster_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = control_plane.node
    assert node is not None
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=SCRIPTED)))
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    request = RunRequest(
        module_path=str(module),
        module_source=ModuleSource.read(module),
        run_id=run_id,
        profile="kubernetes",
        artifact_root=str(artifacts(tmp_path)),
    )

    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        await prepare_run_namespace(kube, run_id)
        try:

            async def kill_the_controller() -> None:
                """SIGKILL to the controller's process, from the node (an OOM kill's signal)."""
                informer = Informer(
                    kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=controller"
                )

                def running(i: Informer) -> str | None:
                    for pod in i.objects.values():
                        for status in pod.get("status", {}).get("containerStatuses") or []:
                            if "running" in status.get("state", {}):
                                return str(status["containerID"]).split("://", 1)[1]
                    return None

                async with anyio.create_task_group() as watch:
                    watch.start_soon(informer.run)
                    container = await informer.until(running)
                    watch.cancel_scope.cancel()
                await anyio.to_thread.run_sync(
                    node.ctr, "tasks", "kill", "--signal", "SIGKILL", container
                )

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_the_controller)
                with anyio.fail_after(120):
                    outcome = await run_controller_job(
                        request, KubernetesSettings.from_environment()
                    )
        finally:
            await delete_run_namespace(kube, run_id)

    assert outcome.outcome == "PlatformLost" and outcome.exit == "failure"
    assert outcome.reason == "controller-job-failed", outcome.cause
    assert "exited 137" in (outcome.cause or ""), outcome.cause
    assert not outcome.receipt.complete


async def test_the_ledger_on_a_retained_volume_outlives_the_controller_pod_and_verifies(
    control_plane: KindPlane,
    cluster_queue: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SOCIETY_LEDGER_PVC``: the Job writes the ledger to the claim; a StorageClass with
    ``reclaimPolicy: Retain`` and a statically provisioned volume (a directory on the node: the
    harness runs no provisioner) keep it after the pod, the Job and the namespace are gone; it
    then verifies offline from the volume."""
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=SCRIPTED)))
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    with retained_volume(control_plane, run_id, monkeypatch) as (directory, phase):
        request = RunRequest(
            module_path=str(module),
            module_source=ModuleSource.read(module),
            run_id=run_id,
            profile="kubernetes",
            artifact_root=str(artifacts(tmp_path)),
        )
        activities = LifecycleActivities()
        result = await run_society(temporal_address, request, activities, activities.execute)
        async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
            left = await left_in_cluster(kube, run_id)
        released = phase()

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    assert left == []  # the pod, the Job, the claim and the namespace are gone
    assert released == "Released"  # its claim is gone; its data stays (Retain)
    ledger_dir = Path(outcome.receipt.ledger_dir)
    assert ledger_dir.is_relative_to(ARTIFACT_ROOT)
    on_volume = directory / ledger_dir.relative_to(ARTIFACT_ROOT)
    spec = load_run_spec(str(module))
    ledger = open_ledger_artifacts(
        spec.catalog,
        on_volume,
        expected_definition_id=spec.id,
        trusted_key=outcome.receipt.public_key,
    )
    assert ledger is not None and outcome.receipt.complete


WAITING_MODULE = """
import anyio
from society_sandbox.runtimes.scripted import ScriptedPolicy
from controller import RunSpec
from controller.agents import scripted


async def execute(ctx):
    await anyio.sleep(600)  # until cancelled


run_spec = RunSpec.define(
    id="{definition}",
    agents={{name: scripted(ScriptedPolicy(), image={image!r}) for name in ("alice", "bob")}},
    execute=execute,
)
"""
CANCEL_DEFINITION = "acme.k8s-cancel/v1"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
CANCEL_BOUND_S = 90.0
"""Cancelling a Job run: the Job and every pod of the run gone within this (the worker waits up
to 60 s for the Job; agents' pods get the kubelet's SIGTERM and their grace period)."""


async def test_cancelling_a_job_run_deletes_every_pod_in_the_bound_and_finalizes_the_ledger(
    control_plane: KindPlane,
    cluster_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The activity's cancellation deletes the Job; its pod's SIGTERM cancels the controller,
    which finalizes the ledger (on the retained volume) before it exits: the ledger verifies
    with ``society ledger verify``, complete and signed, and ends naming the cancellation."""
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    waiting = WAITING_MODULE.format(image=SCRIPTED, definition=CANCEL_DEFINITION)
    module.write_text(textwrap.dedent(waiting))
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    request = RunRequest(
        module_path=str(module),
        module_source=ModuleSource.read(module),
        run_id=run_id,
        profile="kubernetes",
        artifact_root=str(artifacts(tmp_path)),
    )
    with retained_volume(control_plane, run_id, monkeypatch) as (directory, _phase):
        async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
            await prepare_run_namespace(kube, run_id)
            try:
                agents = Informer(kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=agent")

                def both_running(i: Informer) -> bool | None:
                    phases = [p.get("status", {}).get("phase") for p in i.objects.values()]
                    return True if phases == ["Running", "Running"] else None

                with anyio.fail_after(180):
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(agents.run)
                        tasks.start_soon(
                            run_controller_job, request, KubernetesSettings.from_environment()
                        )
                        await agents.until(both_running)
                        cancelled = time.monotonic()
                        tasks.cancel_scope.cancel()
                with anyio.fail_after(CANCEL_BOUND_S):
                    while True:
                        pods, _ = await kube.list("Pod", run_id)
                        job = await kube.get("Job", CONTROLLER_JOB, run_id)
                        if not pods and job is None:
                            break
                        await anyio.sleep(0.5)
                print(f"\ncancel -> Job and pods gone: {time.monotonic() - cancelled:.1f} s")
            finally:
                await delete_run_namespace(kube, run_id)
        ledger_dir = directory / run_id / "ledger" / "main"
        with anyio.fail_after(120):
            verify = await anyio.run_process(
                [*SOCIETY, "ledger", "verify", str(ledger_dir), "--definition", CANCEL_DEFINITION],
                check=False,
            )
        spec = load_run_spec(str(module))
        ledger = open_ledger_artifacts(spec.catalog, ledger_dir)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    summary = json.loads(verify.stdout.decode().splitlines()[-1])
    assert summary["valid"] is True and "complete" not in summary, summary  # completion.json
    assert summary["signature"] == "self" and summary["unsignedRecords"] == 0, summary
    interrupted = list(ledger.events(ProgramInterrupted))
    assert [e.reason for e in interrupted] == ["cancelled"], interrupted
