"""What a run worker inside a cluster accepts, checked before it creates or reads anything.

Anyone who can submit to the worker's task queue chooses the request, so the worker pod takes
only what it was built for: a cluster profile, run as the run's controller Job, from module
content the submitter sent (``module_source``). It never runs a ``local`` profile run (that
would execute the module inside the worker pod, with the worker's identity) and never reads a
``module_path`` from its own disk.
"""

from __future__ import annotations

from controller.platforms.kubernetes.platform import KUBERNETES_PLATFORMS
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.run import RunRequest
from controller.run.module_source import ModuleSource
from controller.run.platform import PlatformError
from controller.settings import current
from controller.stores.gcs import EXPORT_ENV


class WorkerRefused(PlatformError):
    """The run worker in a cluster refuses this request; nothing was created."""

    reason = "worker-refused"


def check_worker_request(request: RunRequest, settings: KubernetesSettings) -> None:
    """Raise ``WorkerRefused`` (or ``ModuleSourceError``) unless an in-cluster worker may run
    ``request``; out of cluster (the submitter's own worker) everything passes."""
    if not settings.in_cluster:
        return
    if request.profile not in KUBERNETES_PLATFORMS:
        raise WorkerRefused(
            f"the run worker in the cluster runs only cluster profiles "
            f"({', '.join(KUBERNETES_PLATFORMS)}), not {request.profile!r}: run a local profile "
            f"with `society run` on your own machine",
            reason="local-profile-in-cluster",
        )
    if not settings.runs_controller_job:
        raise WorkerRefused(
            "the run worker in the cluster runs a controller only as the run's Job; unset "
            "SOCIETY_CONTROLLER_JOB=0 in its Deployment",
            reason="in-process-controller-in-cluster",
        )
    if current().get(EXPORT_ENV) and not settings.ledger_claim:
        raise WorkerRefused(
            f"the run worker exports runs ({EXPORT_ENV}) from the run's ledger claim, and none "
            "is set: set SOCIETY_LEDGER_PVC (the chart's ledger.claim) in its Deployment",
            reason="ledger-claim-missing",
        )
    module_source_of(request)


def module_source_of(request: RunRequest) -> ModuleSource:
    """The module as the submitter sent it, checked against its digest; never a local path."""
    if request.module_source is None:
        raise WorkerRefused(
            f"the request for {request.run_id} carries no module content (module_source); a "
            f"cluster's run worker does not read {request.module_path!r} from its own disk: "
            f"submit with `society run --profile <cluster>`, which sends the module's content",
            reason="module-source-missing",
        )
    request.module_source.verified()
    return request.module_source
