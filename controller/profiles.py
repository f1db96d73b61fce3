"""A profile's name to what runs it: the one place that knows what each profile means.

``local`` runs agents as child processes of ``society run``; ``kind``, ``gke`` and
``kubernetes`` run them as Agent Sandbox pods of a cluster reached through a kubeconfig (or
in-cluster), one namespace per run. The lifecycle and the CLI ask a ``Profile`` what to do and
never compare a profile's name; each platform module loads only when a run asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import controller.settings as settings
from controller.errors import SetupError

if TYPE_CHECKING:
    from controller.run import Progress, RunRequest, RunResult, RunSpec
    from controller.run.platform import Platform
    from controller.stores.gcs import ExportReceipt

CLUSTER_TASK_QUEUE = "society-runs"
"""The task queue a cluster's run worker polls (the chart's ``worker.taskQueue``)."""
IN_CLUSTER_ENV = settings.KUBE_IN_CLUSTER.name
"""Set to ``1`` in a pod of the cluster (the run worker, the controller Job)."""


class UnknownProfile(SetupError):
    """No profile has this name, or this build lacks its platform; ``reason`` says which."""

    reason = "unknown-profile"


@dataclass(frozen=True)
class Profile:
    """What a profile means to a run, as data."""

    name: str
    cluster: bool
    """Agents run in a cluster: a namespace per run, prepared before and deleted after."""
    task_queue: str | None
    """Where ``society run`` submits by default; ``None``: it runs its own worker."""
    ships_source: bool
    """The module travels as its content (the run's worker may be on another machine)."""
    exports: bool
    """The run's ledger must come back exported to a bucket (the result names its URL)."""
    _platform: Callable[[], Platform]

    def platform(self) -> Platform:
        """A fresh platform for one run, configured from this process's environment."""
        return self._platform()

    def apply_profile_file(self, artifact_root: Path, say: Callable[[str], None]) -> None:
        """A cluster profile: install as this process's settings those that ``society cluster
        up`` wrote for it under ``artifact_root``, where the environment has none (a variable
        that is set always wins)."""
        if not self.cluster:
            return
        from controller.platforms.kubernetes.profile_file import apply_profile, profile_path

        environment = dict(settings.current().environ)
        filled = apply_profile(artifact_root, self.name, environment)
        if filled:
            settings.install(settings.current().overlay(filled))
            names = ", ".join(sorted(filled))
            say(f"profile {self.name}: {names} from {profile_path(artifact_root, self.name)}")

    async def install_parts(self, spec: RunSpec, say: Callable[[str], None]) -> None:
        """The local profile, with its worker in this process: install the local model, OpenClaw
        or NanoClaw where the roster needs one that is missing, before anything starts; with
        ``SOCIETY_NO_INSTALL`` set, fail naming the install command instead."""
        if self.cluster:
            return
        import anyio.to_thread

        from controller.platforms.parts import ensure_parts, installs_allowed

        install = installs_allowed()
        await anyio.to_thread.run_sync(lambda: ensure_parts(spec.agents, install=install, say=say))

    async def prepare(self, run_id: str) -> None:
        """What the run needs before its controller starts (a cluster: its namespace)."""
        await self.platform().prepare(run_id)

    async def execute(
        self, request: RunRequest, progress: Progress, spec: RunSpec | None
    ) -> RunResult:
        """Run the controller once: in this process, or in-cluster as the run's controller Job.

        A run worker's pod is in ``society-system``, where the run's Service and network
        policies cannot reach it; there the controller runs as a Job in the run's namespace.
        """
        from controller.run import execute_run

        if not self.runs_controller_here():
            from controller.incluster.controller_job import run_controller_job
            from controller.platforms.kubernetes import KubernetesSettings

            kube = KubernetesSettings.from_environment()
            return await run_controller_job(request, kube, progress=progress)
        return await execute_run(request, self.platform(), progress=progress, spec=spec)

    def runs_controller_here(self) -> bool:
        """Whether ``execute`` runs the controller, and so the researcher's module, in this
        process; where it is the run's controller Job instead, this process never imports the
        module (a run worker holds the operator key and the rights to create runs' objects)."""
        if not self.cluster:
            return True
        from controller.platforms.kubernetes import KubernetesSettings

        return not KubernetesSettings.from_environment().runs_controller_job

    async def export(
        self, run_dir: Path, run_id: str, phase: Callable[[str], None]
    ) -> ExportReceipt | None:
        """The run to the ledger bucket, where this process is configured to export
        (``SOCIETY_LEDGER_EXPORT``): from the run's ledger claim by an export Job when its
        controller Job wrote there, else from ``run_dir``; ``None`` when not configured."""
        import anyio

        from controller.stores.gcs import EXPORT_ENV, export_if_configured

        destination = settings.current().get(EXPORT_ENV)
        if self.cluster and destination:
            from controller.incluster.controller_job import controller_image
            from controller.incluster.export_job import export_from_claim
            from controller.platforms.kubernetes import KubernetesSettings

            kube = KubernetesSettings.from_environment()
            if kube.runs_controller_job and kube.ledger_claim:
                receipt = await export_from_claim(
                    kube, run_id, destination, image=controller_image(kube), phase=phase
                )
                if receipt is not None:
                    return receipt
        return await anyio.to_thread.run_sync(lambda: export_if_configured(run_dir, run_id))

    async def check_reachable(self) -> None:
        """Raise ``ClusterUnavailable`` unless this profile's cluster answers and holds its
        queue; nothing to check on this machine."""
        if self.cluster:
            from controller.platforms.kubernetes.preflight import check_cluster
            from controller.platforms.kubernetes.settings import KubernetesSettings

            await check_cluster(KubernetesSettings.from_environment())

    async def reap(self, run_id: str, artifact_root: Path) -> None:
        """Remove what the run left: its processes on this machine (every profile's controller
        may have started some), then the platform's own (a cluster: the run's namespace)."""
        await reap_here(run_id, artifact_root)
        if self.cluster:
            await self.platform().reap(run_id, artifact_root)


async def reap_here(run_id: str, artifact_root: Path) -> None:
    """Kill what the run left on this machine (agents and their process groups); idempotent."""
    import anyio

    from controller.platforms.local import reap_run

    await anyio.to_thread.run_sync(reap_run, run_id, artifact_root)


def reap_stale_here(artifact_root: Path) -> list[Any]:
    """Reap what runs whose controller died left on this machine under ``artifact_root``; one
    report per run directory looked at (``.skipped`` says why one was left)."""
    from controller.platforms.local import reap_stale_runs

    return list(reap_stale_runs(artifact_root))


def check_worker_request(request: RunRequest) -> None:
    """In a cluster's pod, refuse (``WorkerRefused``, a ``PlatformError``) what a run worker
    must not run, before it creates or imports anything; elsewhere everything passes."""
    if settings.current().get(IN_CLUSTER_ENV) != "1":
        return
    from controller.incluster.worker_requests import check_worker_request as check
    from controller.platforms.kubernetes import KubernetesSettings

    check(request, KubernetesSettings.from_environment())


def _local() -> Platform:
    from controller.platforms.local import LocalPlatform

    return LocalPlatform()


def _kubernetes(name: str) -> Callable[[], Platform]:
    def build() -> Platform:
        try:
            from controller.platforms.kubernetes import KubernetesPlatform
        except ImportError as exc:
            raise UnknownProfile(
                f"profile {name!r} needs the Kubernetes platform, which this build lacks "
                f"({exc}); use --profile local",
                reason="profile-unavailable",
            ) from None
        return KubernetesPlatform.for_profile(name)

    return build


PROFILES: dict[str, Profile] = {
    "local": Profile("local", False, None, False, False, _local),
    "kind": Profile("kind", True, None, True, False, _kubernetes("kind")),
    "gke": Profile("gke", True, CLUSTER_TASK_QUEUE, True, True, _kubernetes("gke")),
    "kubernetes": Profile("kubernetes", True, None, True, False, _kubernetes("kubernetes")),
}
"""Every profile, by name; ``local`` is the default."""
DEFAULT = "local"


def profile_named(name: str) -> Profile:
    """The profile called ``name``; raises ``UnknownProfile`` naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfile(
            f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}",
            reason="unknown-profile",
        ) from None


def platform_for(name: str) -> Platform:
    """The platform that runs profile ``name``; raises ``UnknownProfile`` for an unknown or
    absent one."""
    return profile_named(name).platform()
