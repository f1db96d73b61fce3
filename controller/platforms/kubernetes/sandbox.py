"""One agent's Sandbox: its handle, and what the run's view (the Sandbox and Pod informers)
says about its start, readiness and termination."""

from __future__ import annotations

import signal
from typing import Any, Literal

from controller.agents.runtime import SandboxAccess
from controller.agents.termination import ProcessExit
from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes.kube import Informer, Obj, condition, is_true
from controller.run.platform import Sandbox


class KubernetesSandbox(Sandbox):
    """One pod of an agent's Sandbox: a replacement pod (same name, new uid) is a new handle."""

    def __init__(
        self,
        name: str,
        access: SandboxAccess,
        pod: str,
        uid: str,
        port: int,
        *,
        namespace: str,
        owner: tuple[str, str] | None = None,
        start: Literal["warm", "cold"] = "cold",
    ) -> None:
        self.name = name
        self.access = access
        self.pod = pod
        self.uid = uid
        self.port = port
        """The runtime's bridge port in the pod."""
        self.namespace = namespace
        """Where the pod is: the run's namespace, or the warm pools' for a claimed one."""
        self.owner = owner or ("Sandbox", name)
        """The object whose deletion ends the pod: the agent's Sandbox, or its SandboxClaim."""
        self.start = start
        self.log: bytes | None = None
        self.log_detail: str | None = None


UNPULLABLE = frozenset({"ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})
"""Container waiting reasons that a wait does not cure: the kubelet tried to pull and backs off
(a transient ``ErrImagePull`` alone does not count), must not pull, or cannot parse the name."""


def started(
    sandboxes: Informer, pods: Informer, agent: str, *, superseded: str | None = None
) -> tuple[str, Obj, Obj | None] | None:
    """``("ready", sandbox, pod)`` once its one live pod runs, or how it ended before that
    (``"vanished"``, ``"finished"``, ``"exited"``, ``"unpullable"``: its image cannot be pulled);
    ``None`` while still starting. The pod whose uid is ``superseded`` (a lost one the Sandbox
    controller replaces) does not count. ``pods`` is indexed by the agent label: this looks at
    the agent's own pods only, so a check costs the same with 5 agents or 1,000."""
    sandbox = sandboxes.objects.get(agent)
    if sandbox is None:
        gone = sandboxes.deleted.get(agent)
        return ("vanished", gone, None) if gone is not None else None
    if is_true(sandbox, "Finished") and superseded is None:
        # (Replacing, the condition may still describe the lost pod, which ended as it went.)
        return ("finished", sandbox, None)
    own = [pod for pod in pods.labelled(agent) if pod["metadata"].get("uid") != superseded]
    for pod in own:
        if (
            pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
            or terminated(pod) is not None  # the keeper container keeps the pod Running
        ):
            return ("exited", sandbox, pod)
        if unpullable(pod):
            return ("unpullable", sandbox, pod)
    ready = condition(sandbox, "Ready")
    status = sandbox.get("status", {})
    generation = sandbox["metadata"].get("generation")
    if (
        ready is None
        or ready.get("status") != "True"
        or ready.get("observedGeneration", generation) != generation
        or not status.get("serviceFQDN")
        or not status.get("selector")
    ):
        return None
    live = _live_pods(own, sandbox)
    if len(live) != 1 or live[0].get("status", {}).get("phase") != "Running":
        return None
    return ("ready", sandbox, live[0])


def describe(sandboxes: Informer, pods: Informer, agent: str) -> str:
    """Why the Sandbox of ``agent`` is not ready yet, for a startup timeout's message: its
    Ready condition, and what each of its pods waits for (``waiting``)."""
    sandbox = sandboxes.objects.get(agent)
    ready = condition(sandbox, "Ready") or {}
    error = sandboxes.error or pods.error
    return "; ".join(
        part
        for part in (
            f"Ready={ready.get('status', 'unknown')} {ready.get('message') or ''}".strip(),
            *(waiting(pod) for pod in pods.labelled(agent)),
            f"watch failing: {error}" if error else "",
        )
        if part
    )


def unschedulable(pod: Obj) -> str | None:
    """The scheduler's verdict on a pod it could not place (its ``PodScheduled=False``
    condition's message: which nodes lack what), or ``None``."""
    scheduled = condition(pod, "PodScheduled") or {}
    if scheduled.get("status") != "False":
        return None
    return (scheduled.get("message") or scheduled.get("reason") or "not scheduled").strip()


def waiting(pod: Obj) -> str:
    """What ``pod`` waits for, from its status: the scheduler's verdict while no node takes
    it, else its containers' waiting reasons (``""`` when the status names nothing)."""
    name = pod["metadata"]["name"]
    phase = pod.get("status", {}).get("phase") or "Pending"
    verdict = unschedulable(pod)
    if verdict is not None:
        return f"pod {name} {phase}, unschedulable: {verdict}"
    reasons = []
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = (status.get("state") or {}).get("waiting") or {}
        if state.get("reason"):
            message = (state.get("message") or "").strip()
            detail = f" ({message})" if message else ""
            reasons.append(f"{status.get('name')} {state['reason']}{detail}")
    return f"pod {name} {phase}: " + ", ".join(reasons) if reasons else ""


def exited(pod: Obj) -> str:
    """How ``pod``'s containers ended, from its status (phase, each terminated container's
    reason, exit code and message), for an error's reader."""
    parts = [f"pod {pod['metadata']['name']} {pod.get('status', {}).get('phase') or 'Pending'}"]
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = (status.get("state") or {}).get("terminated") or {}
        if state:
            message = (state.get("message") or "").strip()
            parts.append(
                f"{status.get('name')} {state.get('reason') or 'terminated'}, exit code "
                f"{state.get('exitCode')}" + (f" ({message})" if message else "")
            )
    return "; ".join(parts)


def ended(sandboxes: Informer, pods: Informer, handle: KubernetesSandbox) -> ProcessExit | None:
    """How the agent's process ended (its container, its pod, or the Sandbox gone)."""
    pod = pods.objects.get(handle.pod)
    if pod is not None and pod["metadata"].get("uid") != handle.uid:
        return ProcessExit(signal=signal.SIGKILL)  # vanished; a replacement took its name
    if pod is not None:
        found = terminated(pod)
        if found is not None:
            return found
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return ProcessExit(code=0 if pod["status"]["phase"] == "Succeeded" else 1)
        return None
    gone = pods.deleted.get(handle.pod)
    if gone is not None:
        mine = gone["metadata"].get("uid") == handle.uid
        return (terminated(gone) if mine else None) or ProcessExit(signal=signal.SIGKILL)
    if handle.owner[1] not in sandboxes.objects:
        return ProcessExit(signal=signal.SIGKILL)
    return None


def claimed(
    claims: Informer, pods: Informer, agent: str, claim: str
) -> tuple[str, Obj | None] | None:
    """``("ready", pod)`` once the claimed pod runs with the run's labels (Agent Sandbox puts
    them there after the claim), ``("vanished", None)`` if the claim went, how the pod ended
    (``"exited"``), or ``None`` while waiting. ``claims`` and ``pods`` watch the warm namespace
    for the run's labels."""
    if claim not in claims.objects:
        return ("vanished", None) if claim in claims.deleted else None
    for pod in pods.labelled(agent):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") or terminated(pod):
            return ("exited", pod)
        if pod.get("status", {}).get("phase") == "Running" and pod.get("status", {}).get("podIP"):
            return ("ready", pod)
    return None


def replaceable(sandboxes: Informer, pods: Informer, handle: KubernetesSandbox) -> bool:
    """Whether the Sandbox controller re-creates ``handle``'s pod: the pod is gone or going
    while its Sandbox stays (a program that ended in a pod that stays is not replaced). The
    Sandbox's ``Finished`` does not count: a deleted pod's phase turns terminal as it goes."""
    sandbox = sandboxes.objects.get(handle.name)
    if sandbox is None or sandbox["metadata"].get("deletionTimestamp"):
        return False
    pod = pods.objects.get(handle.pod)
    return (
        pod is None
        or pod["metadata"].get("uid") != handle.uid
        or bool(pod["metadata"].get("deletionTimestamp"))
    )


def terminated(pod: Obj) -> ProcessExit | None:
    """The agent container's exit, once it terminated."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") != objects.AGENT_CONTAINER:
            continue
        state: dict[str, Any] = (status.get("state") or {}).get("terminated") or {}
        if not state:
            return None
        if state.get("signal"):
            return ProcessExit(signal=int(state["signal"]))
        code = int(state.get("exitCode") or 0)
        if code > 128 and code - 128 in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            return ProcessExit(signal=code - 128)  # the container runtime's 128 + n
        return ProcessExit(code=code)
    return None


def unpullable(pod: Obj) -> str | None:
    """Why a container's image of ``pod`` cannot be pulled (image, reason, the kubelet's
    message), or ``None``."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in UNPULLABLE:
            message = (waiting.get("message") or "").strip()
            return f"{status.get('image')}: {waiting['reason']}" + (
                f" ({message})" if message else ""
            )
    return None


def _live_pods(pods: list[Obj], sandbox: Obj) -> list[Obj]:
    selector = _parse_selector(sandbox.get("status", {}).get("selector") or "")
    if not selector:
        return []
    return [
        pod
        for pod in pods
        if _matches(pod, selector)
        and not pod["metadata"].get("deletionTimestamp")
        and pod.get("status", {}).get("phase") in ("Pending", "Running", None)
    ]


def _parse_selector(selector: str) -> dict[str, str]:
    pairs = (part.split("=", 1) for part in selector.split(",") if "=" in part)
    return {key.strip(): value.strip() for key, value in pairs}


def _matches(obj: Obj, selector: dict[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())
