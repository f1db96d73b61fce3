"""Admission of a run's roster through its Kueue Workload: what the Workload's conditions say
(admitted, evicted, deleted), and the admission record or refusal built from them."""

from __future__ import annotations

from collections.abc import Sequence

from controller.events.run import PodSetAdmission, QueueAdmission
from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes.kube import Informer, Obj, condition, is_true
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.run.platform import Admission, AdmissionRefused, PlatformError


def workload_state(workloads: Informer) -> tuple[str, Obj] | None:
    """``("admitted" | "evicted" | "deleted", workload)`` once Kueue decided; else ``None``."""
    workload = workloads.objects.get(objects.WORKLOAD)
    if workload is None:
        gone = workloads.deleted.get(objects.WORKLOAD)
        return ("deleted", gone) if gone is not None else None
    if is_true(workload, "Evicted"):
        return ("evicted", workload)
    if is_true(workload, "Admitted"):
        return ("admitted", workload)
    return None


def workload_loss(workloads: Informer) -> tuple[str, Obj] | None:
    """``(state, workload)`` once an admitted Workload was evicted, withdrawn or deleted."""
    state = workload_state(workloads)
    if state is None or state[0] == "admitted":
        workload = workloads.objects.get(objects.WORKLOAD)
        if workload is not None and not is_true(workload, "Admitted"):
            return ("evicted", workload)  # Kueue withdrew the admission
        return None
    return state


def admission_timed_out(
    workloads: Informer, settings: KubernetesSettings, admission: Admission
) -> AdmissionRefused:
    last = workloads.objects.get(objects.WORKLOAD)
    pending = condition(last, "QuotaReserved") or {}
    return AdmissionRefused(
        f"Kueue did not admit the complete roster within "
        f"{settings.admission_timeout_s:g} s (ClusterQueue {settings.cluster_queue}: "
        f"{pending.get('message') or 'no decision yet'}); nothing was started: raise "
        f"the queue's quota, shrink the roster, or wait longer "
        f"(SOCIETY_ADMISSION_TIMEOUT_S)",
        reason="admission-timeout",
        admission=admission,
    )


def queue_admission(
    workload: Obj, sets: Sequence[objects.PodSet], *, waited_ms: float
) -> QueueAdmission:
    """The admission record of an admitted Workload: its ClusterQueue and pod sets' flavors."""
    status = workload["status"]["admission"]
    assignments = {a["name"]: a for a in status.get("podSetAssignments") or []}
    return QueueAdmission(
        workload=objects.WORKLOAD,
        local_queue=objects.LOCAL_QUEUE,
        cluster_queue=status["clusterQueue"],
        pod_sets=[
            PodSetAdmission(
                name=s.name,
                count=int(assignments.get(s.name, {}).get("count") or len(s.agents)),
                agents=list(s.agents),
                flavors=dict(assignments.get(s.name, {}).get("flavors") or {}),
            )
            for s in sets
        ],
        waited_ms=waited_ms,
    )


def capacity_lost(state: str, workload: Obj) -> PlatformError:
    evicted = condition(workload, "Evicted") or {}
    detail = evicted.get("message") or evicted.get("reason") or "no reason given"
    return PlatformError(
        f"Kueue's Workload for the roster was {state} while the run held it ({detail}); "
        f"the run lost its capacity",
        reason=f"workload-{state}",
    )
