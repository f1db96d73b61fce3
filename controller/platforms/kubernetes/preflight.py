"""Before a cluster run is submitted: is the cluster reachable, and does its ClusterQueue exist?"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from controller.errors import SetupError
from controller.platforms.kubernetes.kube import Kube
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.settings import current


class ClusterUnavailable(SetupError):
    """The cluster cannot take a run; ``reason`` is machine-readable, the message says what next."""

    reason = "cluster-unavailable"


async def check_cluster(settings: KubernetesSettings) -> None:
    """Raise ``ClusterUnavailable`` unless the cluster answers and holds the profile's queue."""
    if not settings.in_cluster:
        check_kubeconfig(settings)
    where = "in-cluster" if settings.in_cluster else settings.kubeconfig or "the default kubeconfig"
    try:
        # A user waits on this answer: a refused connection fails it within a few seconds.
        async with Kube.of(settings, as_controller=False, connect_retry_s=3.0) as kube:
            queue = await kube.get("ClusterQueue", settings.cluster_queue)
    except Exception as exc:  # the client raises many unrelated types for one meaning
        raise ClusterUnavailable(
            f"cannot use the cluster from {where}: {exc}. Point SOCIETY_KUBECONFIG (and "
            f"SOCIETY_KUBE_CONTEXT) at a cluster with Kueue and Agent Sandbox installed "
            f"(helm/society-runner, kind/README.md), or run with --profile local",
            reason="cluster-unreachable",
        ) from exc
    if queue is None:
        raise ClusterUnavailable(
            f"the cluster from {where} has no Kueue ClusterQueue {settings.cluster_queue!r}; "
            f"install helm/society-runner or set SOCIETY_CLUSTER_QUEUE to an existing one",
            reason="cluster-queue-missing",
        )


def kubeconfig_files(
    settings: KubernetesSettings, environ: Mapping[str, str] | None = None
) -> list[Path]:
    """The kubeconfig files the client would read: ``SOCIETY_KUBECONFIG``, else each file in
    ``$KUBECONFIG``, else ``~/.kube/config``."""
    env = current().environ if environ is None else environ
    if settings.kubeconfig:
        return [Path(settings.kubeconfig).expanduser()]
    listed = [part for part in env.get("KUBECONFIG", "").split(os.pathsep) if part]
    return [Path(part).expanduser() for part in listed] or [Path("~/.kube/config").expanduser()]


def check_kubeconfig(
    settings: KubernetesSettings, environ: Mapping[str, str] | None = None
) -> None:
    """Raise ``ClusterUnavailable("kubeconfig-missing")`` naming the file when no kubeconfig
    exists, before the client library is asked (it would print a stray line, then complain about
    a missing ``current-context``)."""
    files = kubeconfig_files(settings, environ)
    if not any(path.is_file() for path in files):
        named = ", ".join(str(path) for path in files)
        raise ClusterUnavailable(
            f"no kubeconfig at {named}: create a cluster with `society cluster up --profile kind`, "
            "or set KUBECONFIG (or SOCIETY_KUBECONFIG) to an existing cluster's kubeconfig",
            reason="kubeconfig-missing",
        )
