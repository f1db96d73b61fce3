"""The Kubernetes profiles (``kind``, ``gke``, and ``kubernetes`` for any cluster): one
namespace per run, Kueue admission of the complete roster, one Agent Sandbox per agent.

The same code runs in-cluster (the controller Job, ``SOCIETY_KUBE_IN_CLUSTER=1``) and out of
cluster against a kubeconfig (tests, debugging); out of cluster the session also prepares and
deletes the run's namespace, which in-cluster is the run worker's job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ClassVar

import anyio

from controller.agents.runtime import RuntimeDescriptor
from controller.events.run import Capacity
from controller.network.tls import RouterTLS
from controller.platforms.kubernetes import objects, routing
from controller.platforms.kubernetes.images import ImageMap
from controller.platforms.kubernetes.kube import Kube
from controller.platforms.kubernetes.namespace import delete_run_namespace, prepare_run_namespace
from controller.platforms.kubernetes.session import BridgeAddress, KubernetesSession
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.run.platform import (
    Admission,
    AdmissionRefused,
    Platform,
    PlatformError,
    PlatformSession,
    RunPlacement,
    roster_requests,
)
from controller.services import LocalModelStarter

_NOTHING = Capacity(cpu=0, memory_mib=0, agents=0)
NAMESPACE_GONE_S = 100.0
"""How long ``reap`` waits for the namespace to go: inside cleanup's 2 min attempt."""


async def _service_address(run_id: str, agent: str, default: tuple[str, int]) -> tuple[str, int]:
    return default


class KubernetesPlatform(Platform):
    """One run on a cluster; build one per run (it remembers the roster it admitted)."""

    profile: ClassVar[str] = "kubernetes"

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        *,
        bridge_address: BridgeAddress | None = None,
    ) -> None:
        self.settings = settings or KubernetesSettings.from_environment()
        self.external_router = None if self.settings.in_cluster else self.settings.router_address
        """Where pods reach this controller when it runs outside the cluster (debugging)."""
        if self.external_router is not None:
            try:
                routing.external_address(self.external_router)
            except ValueError as error:
                raise PlatformError(str(error), reason="router-address-invalid") from None
        self.router_host = (
            "0.0.0.0" if self.settings.in_cluster else self.external_router or "127.0.0.1"
        )
        self._images: ImageMap | None = None
        self.bridge_address: BridgeAddress = bridge_address or _service_address
        self.roster: Mapping[str, RuntimeDescriptor] = {}
        self.pod_sets: list[objects.PodSet] = []
        self._tls: dict[str, RouterTLS] = {}

    def local_model(self) -> LocalModelStarter:
        """The controller's own process serves the local model (the gateway fronts it)."""
        from controller.platforms.local_model import start_local_model

        return start_local_model

    @classmethod
    def for_profile(cls, profile: str) -> KubernetesPlatform:
        """The platform for ``kind``, ``gke`` or ``kubernetes``, configured from the environment."""
        return KUBERNETES_PLATFORMS[profile]()

    @property
    def images(self) -> ImageMap:
        """The image map (``SOCIETY_IMAGE_MAP``), read once."""
        if self._images is None:
            self._images = ImageMap.parse(self.settings.image_map)
        return self._images

    def pinned(self, descriptor: RuntimeDescriptor) -> RuntimeDescriptor:
        """``descriptor`` with its image resolved through the image map (pinned by digest)."""
        image = self.images.resolve(descriptor.image)
        return (
            descriptor
            if image == descriptor.image
            else dataclasses.replace(descriptor, image=image)
        )

    def admit(self, roster: Mapping[str, RuntimeDescriptor]) -> Admission:
        """Check what can be checked before anything exists: pinned images (resolved through
        the image map), Kueue's shape limit. The queue's own admission happens in the session,
        before any Sandbox."""
        try:
            roster = {name: self.pinned(d) for name, d in roster.items()}
        except PlatformError as exc:
            raise AdmissionRefused(
                str(exc),
                reason=exc.reason,
                admission=Admission((), _NOTHING, _NOTHING),
            ) from None
        requests, requested = roster_requests(roster)
        admission = Admission(requests, requested, requested)
        unpinned = sorted(name for name, d in roster.items() if not d.image_pinned)
        if unpinned:
            raise AdmissionRefused(
                f"cluster profiles run images pinned by digest (image@sha256:...); "
                f"{', '.join(unpinned)} use {roster[unpinned[0]].image!r}, which "
                f"{_unmapped(self.images)}: "
                f"run scripts/build-images.sh and set SOCIETY_IMAGE_MAP to the map it prints, "
                f"or pass image=...@sha256:<digest>",
                reason="image-not-pinned",
                admission=admission,
            )
        try:
            self.pod_sets = objects.pod_sets(roster)
        except PlatformError as exc:
            raise AdmissionRefused(str(exc), reason=exc.reason, admission=admission) from None
        self.roster = dict(roster)
        return admission

    async def prepare(self, run_id: str) -> None:
        """The run's namespace, owner and controller identity; idempotent."""
        async with Kube.of(self.settings) as kube:
            await prepare_run_namespace(
                kube, run_id, credentials_namespace=self.settings.credentials_namespace
            )

    async def reap(self, run_id: str, artifact_root: Path) -> None:
        """Delete the run's namespace (its sandboxes go with it) and wait until it is gone."""
        async with Kube.of(self.settings) as kube:
            await delete_run_namespace(
                kube,
                run_id,
                timeout_s=NAMESPACE_GONE_S,
                credentials_namespace=self.settings.credentials_namespace,
            )

    def router_tls(self, run_id: str) -> RouterTLS:
        """A per-run CA; the certificate names the router's Service (and loopback, for a
        controller out of cluster)."""
        tls = self._tls.get(run_id)
        if tls is None:
            host = routing.router_host(run_id)
            tls = RouterTLS.generate([host, f"{host}.cluster.local", "localhost", "127.0.0.1"])
            self._tls[run_id] = tls
        return tls

    def tls_for(self, run_id: str) -> RouterTLS | None:
        return self._tls.get(run_id)

    @asynccontextmanager
    async def session(self, placement: RunPlacement) -> AsyncIterator[PlatformSession]:
        settings = self.settings
        run_id = placement.run_id
        async with Kube.of(settings) as kube:
            try:
                if settings.prepares:
                    owner = await prepare_run_namespace(
                        kube, run_id, credentials_namespace=settings.credentials_namespace
                    )
                else:
                    found = await kube.get("ConfigMap", objects.OWNER, run_id)
                    if found is None:
                        raise PlatformError(
                            f"namespace {run_id} has no {objects.OWNER} ConfigMap: the run worker "
                            f"did not prepare it",
                            reason="namespace-not-prepared",
                        )
                    owner = found
                async with anyio.create_task_group() as tasks:
                    session = KubernetesSession(self, kube, placement, owner, tasks)
                    await session.open()
                    try:
                        yield session
                    finally:
                        with anyio.CancelScope(shield=True):
                            try:
                                await session.teardown()
                            except PlatformError:
                                pass  # deleting the namespace below (or the worker's) covers it
                        tasks.cancel_scope.cancel()
            finally:
                if settings.deletes:
                    with anyio.CancelScope(shield=True):
                        await delete_run_namespace(
                            kube, run_id, credentials_namespace=settings.credentials_namespace
                        )


def _unmapped(images: ImageMap) -> str:
    if images.source:
        return f"the image map from {images.source} does not name"
    return "no image map names (SOCIETY_IMAGE_MAP is unset)"


class KindPlatform(KubernetesPlatform):
    """A local kind cluster (the ``kind`` profile)."""

    profile: ClassVar[str] = "kind"


class GkePlatform(KubernetesPlatform):
    """A team's GKE cluster (the ``gke`` profile)."""

    profile: ClassVar[str] = "gke"


KUBERNETES_PLATFORMS: dict[str, type[KubernetesPlatform]] = {
    "kind": KindPlatform,
    "gke": GkePlatform,
    "kubernetes": KubernetesPlatform,
}
"""The profiles this platform serves, each with its class."""
