"""A run's namespace: prepared with its owner and the controller's identity, deleted whole.

``prepare_run_namespace`` is what the run worker does before the controller starts (and what an
out-of-cluster controller does for itself); ``delete_run_namespace`` is the whole cleanup.
"""

from __future__ import annotations

import anyio

from controller.platform.kubernetes import access, objects
from controller.platform.kubernetes.kube import Kube, KubeError, Obj
from controller.run.platform import PlatformError


async def prepare_run_namespace(
    kube: Kube, run_id: str, *, credentials_namespace: str | None = None
) -> Obj:
    """The namespace, its owner object and the controller's ServiceAccount, Role and binding;
    idempotent (server-side apply). Returns the live owner.

    When ``credentials_namespace`` exists, the controller is also bound there to the
    credentials reader Role (``SecretRef(secret=..., key=...)`` are read by name from it).
    """
    await kube.apply(objects.namespace(run_id))
    owner = await kube.apply(objects.owner(run_id))
    for obj in (
        access.controller_account(run_id),
        access.controller_role(run_id),
        access.controller_binding(run_id),
    ):
        await kube.apply(objects.owned(obj, owner))
    if credentials_namespace and await kube.get("Namespace", credentials_namespace) is not None:
        await kube.apply(access.credentials_binding(run_id, credentials_namespace))
    return owner


async def delete_run_namespace(
    kube: Kube, run_id: str, *, timeout_s: float = 300.0, credentials_namespace: str | None = None
) -> bool:
    """Delete the run's namespace and wait until it is gone; ``False`` if it never existed.

    The run's binding in ``credentials_namespace`` (outside the namespace, so not collected with
    it) is deleted first.

    Only a namespace labelled as this run's is deleted. Raises ``PlatformError`` when it is
    still there after ``timeout_s`` (a stuck finalizer: the message names it).
    """
    if credentials_namespace:
        binding = access.credentials_binding_name(run_id)
        await kube.delete("RoleBinding", binding, credentials_namespace)
    existing = await kube.get("Namespace", run_id)
    if existing is None:
        return False
    if existing["metadata"].get("labels", {}).get(objects.RUN_LABEL) != run_id:
        raise PlatformError(
            f"namespace {run_id} is not labelled {objects.RUN_LABEL}={run_id}; refusing to "
            f"delete it",
            reason="foreign-namespace",
        )
    await kube.delete("Namespace", run_id, propagation="Foreground")
    with anyio.move_on_after(timeout_s):
        await wait_namespace_gone(kube, run_id)
        return True
    left = await kube.get("Namespace", run_id)
    conditions = (left or {}).get("status", {}).get("conditions") or []
    stuck = "; ".join(c.get("message", "") for c in conditions if c.get("status") == "True")
    raise PlatformError(
        f"namespace {run_id} is still terminating after {timeout_s:g} s ({stuck or 'no reason'}); "
        f"check its finalizers with kubectl get namespace {run_id} -o yaml",
        reason="namespace-stuck",
    )


async def wait_namespace_gone(kube: Kube, run_id: str) -> None:
    """Watch (not poll) until the namespace no longer exists."""
    selector = f"{objects.RUN_LABEL}={run_id}"
    while True:
        items, version = await kube.list("Namespace", label_selector=selector)
        if not any(item["metadata"]["name"] == run_id for item in items):
            return
        try:
            async for kind, obj in kube.watch(
                "Namespace", None, resource_version=version, label_selector=selector, timeout_s=30
            ):
                if kind == "DELETED" and obj["metadata"]["name"] == run_id:
                    return
        except KubeError as exc:
            if exc.status != 410:
                raise
