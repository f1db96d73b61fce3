"""The run worker's ``execute`` in-cluster: the controller as a Job in the run's namespace.

The worker puts the RunSpec module, as the submitter sent its content (``module_source``, never
a path on the worker's disk), in the immutable ``ConfigMap/society-runspec``, the ledger
claim (``SOCIETY_LEDGER_PVC``) when configured, and ``Job/society-controller``
(``access.controller_job``: ``backoffLimit: 0``, so the program runs at most once); then it
watches the Job and its pod until the controller reports. The controller
(``incluster.py``, the same ``execute_run`` as out of cluster) writes its ``RunResult`` to the
container's termination message; a Job that fails, completes or vanishes without one ends the
run as ``PlatformLost`` with the reason. Cancelling deletes the Job with foreground propagation:
its pod gets SIGTERM and the controller finalizes the ledger before it exits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

import controller.settings as s
from controller.incluster import access
from controller.incluster.ledger_home import LedgerHomeError, bring_home
from controller.incluster.worker_requests import module_source_of
from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes.images import CONTROLLER_IMAGE, ImageMap, pinned
from controller.platforms.kubernetes.kube import Informer, Kube, KubeError, Obj, condition, is_true
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.run import NO_PROGRESS, Progress, RunRequest, RunResult
from controller.run.platform import PlatformError
from ledger.records import LedgerReceipt
from ledger.signing import SigningKey

T = TypeVar("T")
CONTROLLER_SELECTOR = f"{objects.ROLE_LABEL}=controller"
CONTAINER = "controller"
MODULE_DIGEST_ENV = s.RUN_MODULE_SHA256.name
"""The controller checks the mounted module against this digest before importing it."""
FORWARDED_SETTINGS = (
    s.ADMISSION_TIMEOUT_S.name,
    s.STARTUP_TIMEOUT_S.name,
    s.RUN_DEADLINE_S.name,
    s.CREDENTIALS_NAMESPACE.name,
    s.AGENT_NODE_SELECTOR.name,
    s.AGENT_TOLERATIONS.name,
    s.IMAGE_MAP.name,
)


async def run_controller_job(
    request: RunRequest,
    settings: KubernetesSettings,
    *,
    progress: Progress | None = None,
    cancel_grace_s: float = 60.0,
) -> RunResult:
    """Create the run's controller Job, observe it until it reports, return its result."""
    progress = progress or NO_PROGRESS
    images = ImageMap.parse(settings.image_map)
    image = controller_image(settings, images)
    run_id = request.run_id
    module = module_source_of(request)
    source = module.content.encode("utf-8")
    async with Kube.of(settings) as kube:
        owner = await kube.get("ConfigMap", objects.OWNER, run_id)
        if owner is None:
            raise PlatformError(
                f"namespace {run_id} has no {objects.OWNER} ConfigMap: prepare did not run",
                reason="namespace-not-prepared",
            )
        progress.phase(f"creating the controller Job in {run_id}")
        await kube.apply(
            objects.owned(access.runspec_configmap(run_id, module.name, source), owner)
        )
        if settings.ledger_claim:
            await kube.apply(
                access.ledger_claim(
                    run_id,
                    settings.ledger_claim,
                    storage_class=settings.ledger_storage_class,
                    size=settings.ledger_size,
                )
            )
        signing = None
        if settings.signing_key:
            pem = SigningKey.load(settings.signing_key).private_pem()  # refuses a bad key here
            # create, never apply: the worker may create Secrets, not patch or read them
            secret = objects.owned(access.signing_key_secret(run_id, pem), owner)
            try:
                await kube.create(secret)
            except KubeError as error:
                if error.status != 409:  # a retried execute finds its own immutable Secret
                    raise
            signing = access.SIGNING_SECRET
            progress.phase(f"the controller signs with the operator key {settings.signing_key}")
        job = access.controller_job(
            run_id,
            image=image,
            module_name=module.name,
            seed=request.seed,
            profile=request.profile,
            cluster_queue=settings.cluster_queue,
            active_deadline_s=int(settings.run_deadline_s),
            ledger_claim=settings.ledger_claim,
            environment={**_forwarded(settings, images), MODULE_DIGEST_ENV: module.sha256},
            node_selector=settings.controller_node_selector,
            signing_key_secret=signing,
        )
        await kube.apply(objects.owned(job, owner))
        try:
            result = await ControllerJob(kube, run_id, progress).outcome()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                progress.phase("cancelled: deleting the controller Job (the controller finalizes)")
                await kube.delete("Job", access.CONTROLLER_JOB, run_id, propagation="Foreground")
                with anyio.move_on_after(cancel_grace_s):
                    await ControllerJob(kube, run_id, progress).gone()
            raise
        try:
            return await bring_home(kube, result, settings, Path(request.artifact_root), progress)
        except LedgerHomeError as error:  # the volume outlives the namespace: nothing is lost
            progress.phase(f"ledger: not copied home ({error.reason}): {error}")
            return result


def controller_image(settings: KubernetesSettings, images: ImageMap | None = None) -> str:
    """The controller image (the controller Job's and the export Job's), pinned by digest."""
    images = images or ImageMap.parse(settings.image_map)
    image = images.resolve(settings.controller_image or CONTROLLER_IMAGE)
    if not image or not pinned(image):
        raise PlatformError(
            f"the controller Job needs its image pinned by digest, and {image!r} is not: run "
            f"scripts/build-images.sh and set SOCIETY_IMAGE_MAP to the map it prints, or set "
            f"SOCIETY_CONTROLLER_IMAGE to image@sha256:...; SOCIETY_CONTROLLER_JOB=0 runs the "
            f"controller here instead (debugging; needs SOCIETY_ROUTER_ADDRESS)",
            reason="controller-image-missing",
        )
    return image


def _forwarded(settings: KubernetesSettings, images: ImageMap) -> dict[str, str]:
    values = {
        s.IMAGE_MAP.name: images.to_json() if images.images else "",
        s.ADMISSION_TIMEOUT_S.name: f"{settings.admission_timeout_s:g}",
        s.STARTUP_TIMEOUT_S.name: f"{settings.startup_timeout_s:g}",
        s.RUN_DEADLINE_S.name: f"{settings.run_deadline_s:g}",
        s.CREDENTIALS_NAMESPACE.name: settings.credentials_namespace,
        s.AGENT_NODE_SELECTOR.name: ",".join(
            f"{k}={v}" for k, v in (settings.agent_node_selector or {}).items()
        ),
        s.AGENT_TOLERATIONS.name: json.dumps(settings.agent_tolerations or []),
    }
    return {name: values[name] for name in FORWARDED_SETTINGS if values[name]}


class JobWatch:
    """A watch on a Job of the run and its pods, by label (list, then watch; never a sleep):
    ``_until(check)`` waits, level-triggered, until ``check()`` returns something."""

    def __init__(self, kube: Kube, run_id: str, selector: str) -> None:
        self.kube = kube
        self.run_id = run_id
        self._changed = anyio.Event()
        self.jobs, self.pods = (
            Informer(kube, kind, run_id, label_selector=selector, notify=self._notify)
            for kind in ("Job", "Pod")
        )

    def _notify(self, changed: Obj | None) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _until(self, check: Callable[[], T | None]) -> T:
        async with anyio.create_task_group() as tasks:
            for informer in (self.jobs, self.pods):
                tasks.start_soon(informer.run)
            for informer in (self.jobs, self.pods):
                await informer.synced.wait()
            while True:
                changed = self._changed
                found = check()
                if found is not None:
                    tasks.cancel_scope.cancel()
                    return found
                await changed.wait()
        raise AssertionError("unreachable")  # pragma: no cover


class ControllerJob(JobWatch):
    """A watch on the run's controller Job and its pod."""

    def __init__(self, kube: Kube, run_id: str, progress: Progress) -> None:
        super().__init__(kube, run_id, CONTROLLER_SELECTOR)
        self.progress = progress
        self._phase = ""

    async def gone(self) -> None:
        """Until the Job no longer exists (after a foreground delete: its pod is gone too)."""
        await self._until(lambda: True if access.CONTROLLER_JOB not in self.jobs.objects else None)

    async def outcome(self) -> RunResult:
        """The controller's result; ``PlatformLost`` if the Job ended or vanished without one."""
        ended: RunResult | tuple[str, str] = await self._until(self._ended)
        if isinstance(ended, RunResult):
            return ended
        # The Job's verdict may arrive before its pod's final status: read the pods afresh.
        pods, _ = await self.kube.list("Pod", self.run_id, label_selector=CONTROLLER_SELECTOR)
        for pod in pods:
            if (result := _reported(pod)) is not None:
                return result
        reason, detail = ended
        return self._lost(reason, f"{detail}{_pod_story(pods)}")

    def _ended(self) -> RunResult | tuple[str, str] | None:
        for pod in self.pods.objects.values():
            if (result := _reported(pod)) is not None:
                return result
        self._report_phase()
        job = self.jobs.objects.get(access.CONTROLLER_JOB)
        if job is None:
            return "controller-job-deleted", "the controller Job was deleted before it reported"
        for kind in ("Failed", "Complete"):
            if is_true(job, kind):
                found = condition(job, kind) or {}
                why = found.get("reason") or kind
                return "controller-job-failed", (
                    f"the controller Job ended ({kind}: {why}: {found.get('message') or ''}) "
                    f"without reporting a result"
                )
        return None

    def _report_phase(self) -> None:
        phases = sorted(p.get("status", {}).get("phase") or "?" for p in self.pods.objects.values())
        text = f"controller Job: pod {', '.join(phases)}" if phases else "controller Job: no pod"
        if text != self._phase:
            self._phase = text
            self.progress.phase(text)

    def _lost(self, reason: str, cause: str) -> RunResult:
        ledger_dir = f"{access.ARTIFACT_ROOT}/{self.run_id}"
        receipt = LedgerReceipt(
            ledger_dir=ledger_dir,
            run_id=self.run_id,
            record_count=0,
            head_digest="",
            public_key="",
            complete=False,
        )
        return RunResult(
            outcome="PlatformLost",
            exit="failure",
            cause=f"{reason}: {cause}",
            reason=reason,
            run_id=self.run_id,
            ledger_dir=ledger_dir,
            receipt=receipt,
            records=0,
            public_key="",
        )


def _terminated(pod: Obj) -> dict[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            terminated: dict[str, Any] | None = (status.get("state") or {}).get("terminated")
            return terminated
    return None


def _reported(pod: Obj) -> RunResult | None:
    """The result in the controller container's termination message, if it left one."""
    message = (_terminated(pod) or {}).get("message")
    if not message:
        return None
    try:
        return RunResult.model_validate_json(message)
    except ValueError:
        return None


def _pod_story(pods: list[Obj]) -> str:
    for pod in pods:
        terminated = _terminated(pod)
        if terminated is not None:
            code = terminated.get("exitCode")
            signal = f", signal {terminated['signal']}" if terminated.get("signal") else ""
            name, why = pod["metadata"]["name"], terminated.get("reason")
            return f"; its pod {name} exited {code}{signal} ({why})"
    if pods:
        name, phase = pods[0]["metadata"]["name"], pods[0].get("status", {}).get("phase")
        return f"; its pod {name} is {phase}"
    return "; no pod of it is left"
