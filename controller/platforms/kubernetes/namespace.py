"""A run's namespace: prepared with its owner and the controller's identity, deleted whole.

``prepare_run_namespace`` is what the run worker does before the controller starts (and what an
out-of-cluster controller does for itself); ``delete_run_namespace`` is the whole cleanup. Both
work with the run worker's least rights (``rbac``): the namespace is created, never patched;
the preparer then binds itself in it, and every later step uses that binding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from controller.platforms.kubernetes import objects, rbac
from controller.platforms.kubernetes.kube import Kube, KubeError, Obj, at_once
from controller.platforms.kubernetes.warm import WARM_NAMESPACE, policy_names
from controller.run.platform import PlatformError

BINDING_WAIT_S = 15.0
"""How long a fresh RoleBinding may take to reach the API server's authorizer."""


async def prepare_run_namespace(
    kube: Kube, run_id: str, *, credentials_namespace: str | None = None
) -> Obj:
    """The namespace, its owner object and the controller's ServiceAccount and binding;
    idempotent. Returns the live owner.

    When ``credentials_namespace`` exists, the controller is also bound there to the
    credentials reader Role (``SecretRef(secret=..., key=...)`` are read by name from it); when
    the warm namespace exists, to the warm claimer Role there (``warm``).
    """
    _, username = await at_once(lambda: ensure_run_roles(kube), lambda: whoami(kube))
    await _create_namespace(kube, run_id, username)
    await _create_or_keep(kube, rbac.worker_binding(run_id, username))
    await wait_allowed(kube, run_id, "create", "configmaps")
    owner = await kube.apply(objects.owner(run_id))

    async def bind_in(namespace: str, binding: Obj) -> None:
        if await kube.get("Namespace", namespace) is not None:
            await kube.apply(binding)

    calls: list[Callable[[], Coroutine[Any, Any, Any]]] = [
        functools.partial(kube.apply, objects.owned(rbac.controller_account(run_id), owner)),
        functools.partial(kube.apply, objects.owned(rbac.controller_binding(run_id), owner)),
        functools.partial(bind_in, WARM_NAMESPACE, rbac.warm_binding(run_id, WARM_NAMESPACE)),
    ]
    if credentials_namespace:
        binding = rbac.credentials_binding(run_id, credentials_namespace)
        calls.append(functools.partial(bind_in, credentials_namespace, binding))
    await at_once(*calls)
    return owner


async def ensure_run_roles(kube: Kube) -> None:
    """The ClusterRoles a run binds exist with this version's rules: installed by the Helm chart;
    an administrator's out-of-cluster run installs them itself."""
    await at_once(*(functools.partial(_ensure_role, kube, r) for r in rbac.run_cluster_roles()))


async def _ensure_role(kube: Kube, role: Obj) -> None:
    name = role["metadata"]["name"]
    try:
        live = await kube.get("ClusterRole", name)
        if live is not None and live.get("rules") == role["rules"]:
            return
        await kube.apply(role)
    except KubeError as exc:
        if exc.status != 403:
            raise
        raise PlatformError(
            f"the ClusterRole {name} is missing or differs from this version's and this "
            f"identity may not install it; install or upgrade the Helm chart "
            f"(helm upgrade --install society-runner helm/society-runner)",
            reason="cluster-roles-missing",
        ) from None


async def _create_namespace(kube: Kube, run_id: str, username: str) -> None:
    """Created (never patched), annotated with its creator; a retry finds its own."""
    manifest = objects.namespace(run_id)
    manifest["metadata"]["annotations"] = {rbac.CREATED_BY: username}
    try:
        await kube.create(manifest)
        return
    except KubeError as exc:
        if exc.status != 409:
            raise
    existing = await kube.get("Namespace", run_id) or {}
    _check_ours(existing, run_id)
    if existing["metadata"].get("deletionTimestamp"):
        raise PlatformError(
            f"namespace {run_id} is being deleted; wait until it is gone or use a fresh run id",
            reason="namespace-terminating",
        )


def _check_ours(namespace: Obj, run_id: str) -> None:
    if namespace.get("metadata", {}).get("labels", {}).get(objects.RUN_LABEL) != run_id:
        raise PlatformError(
            f"namespace {run_id} is not labelled {objects.RUN_LABEL}={run_id}; refusing to "
            f"use or delete it",
            reason="foreign-namespace",
        )


async def _create_or_keep(kube: Kube, binding: Obj) -> None:
    """Create ``binding``; an existing one must bind the same role to the same subjects."""
    try:
        await kube.create(binding)
        return
    except KubeError as exc:
        if exc.status != 409:
            raise
    meta = binding["metadata"]
    live = await kube.get("RoleBinding", meta["name"], meta["namespace"]) or {}
    if (live.get("roleRef"), live.get("subjects")) != (binding["roleRef"], binding["subjects"]):
        raise PlatformError(
            f"RoleBinding {meta['namespace']}/{meta['name']} exists with other subjects or role; "
            f"use a fresh run id",
            reason="foreign-binding",
        )


async def whoami(kube: Kube) -> str:
    """The user name the API server authenticates this connection as (SelfSubjectReview)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}}
    return str((await kube.create(review))["status"]["userInfo"]["username"])


async def wait_allowed(
    kube: Kube, namespace: str, verb: str, resource: str, *, timeout_s: float = BINDING_WAIT_S
) -> None:
    """Until the API server's authorizer lets this identity ``verb`` ``resource`` there.

    RBAC reaches the authorizer through a cache, so a RoleBinding just created may not count
    yet; there is no watch on that cache, so this asks (SelfSubjectAccessReview) with backoff.
    """
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {},
        "spec": {
            "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": resource}
        },
    }
    delay = 0.02
    with anyio.move_on_after(timeout_s):
        while not (await kube.create(review))["status"].get("allowed"):
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.5)
        return
    raise PlatformError(
        f"the RoleBinding {rbac.WORKER_BINDING} in {namespace} did not let this identity "
        f"{verb} {resource} within {timeout_s:g} s; check the ClusterRole "
        f"{rbac.RUN_NAMESPACE_ROLE}",
        reason="binding-not-effective",
    )


async def delete_run_namespace(
    kube: Kube, run_id: str, *, timeout_s: float = 300.0, credentials_namespace: str | None = None
) -> bool:
    """Delete the run's namespace and wait until it is gone; ``False`` if it never existed.

    The run's bindings in ``credentials_namespace`` and the warm namespace and, there, any claim
    and policy its controller left (all outside the namespace, so not collected with it) are
    deleted first.

    Only a namespace labelled as this run's is deleted. Raises ``PlatformError`` when it is
    still there after ``timeout_s`` (a stuck finalizer: the message names it).
    """
    if credentials_namespace:
        binding = rbac.credentials_binding_name(run_id)
        await kube.delete("RoleBinding", binding, credentials_namespace)
    if await kube.get("Namespace", WARM_NAMESPACE) is not None:
        await release_warm(kube, run_id)
    existing = await kube.get("Namespace", run_id)
    if existing is None:
        return False
    _check_ours(existing, run_id)
    # A retry finds it terminating: its RoleBinding (the right to delete it) may be gone already.
    if not existing["metadata"].get("deletionTimestamp"):
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


async def release_warm(kube: Kube, run_id: str) -> None:
    """What a run holds in the warm namespace: its claims (a killed controller leaves them; each
    holds a pool's sandbox until its ``shutdownTime``), its policy and its controller's binding."""
    try:
        claims, _ = await kube.list(
            "SandboxClaim", WARM_NAMESPACE, label_selector=objects.run_selector(run_id)
        )
    except KubeError as exc:
        if exc.status != 404:  # no warm pools' API here: nothing was claimed
            raise
        claims = []
    for claim in claims:
        await kube.delete("SandboxClaim", claim["metadata"]["name"], WARM_NAMESPACE)
    for policy in policy_names(run_id):
        await kube.delete("NetworkPolicy", policy, WARM_NAMESPACE)
    await kube.delete("RoleBinding", rbac.warm_binding_name(run_id), WARM_NAMESPACE)


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
