"""The run worker's rights for tests: the chart's RBAC applied as ``helm install`` would, the
worker's identity, probes, and the takeover rights it must not hold (import fixtures by name)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine
from typing import Any

import anyio
import pytest
from cluster_support import PINNED
from plane import Plane
from test_helm_chart import render

from controller.incluster.access import controller_job
from controller.platforms.kubernetes import Kube, KubeError
from controller.platforms.kubernetes.rbac import RUN_NAMESPACE_ROLE, worker_subject

WORKER = worker_subject()
WORKER_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:society-system"]
CREDENTIALS = "society-credentials"
CHART_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


async def forbidden(call: Coroutine[Any, Any, Any]) -> bool:
    """True when the API server refuses the call (403), by RBAC or by an admission policy."""
    try:
        await call
    except KubeError as exc:
        return exc.status == 403
    return False


def account_groups(namespace: str) -> list[str]:
    """The groups the API server gives a ServiceAccount of ``namespace`` that shows its token."""
    return ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]


async def reviewed_allowed(
    admin: Kube,
    user: str,
    groups: list[str],
    verb: str,
    group: str,
    resource: str,
    namespace: str = "",
    name: str = "",
) -> bool:
    """What a SubjectAccessReview (RBAC only) answers for ``user`` in ``groups``;
    ``resource`` may name a subresource (``pods/exec``)."""
    kind, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": kind}
    attributes |= {"subresource": subresource} if subresource else {}
    attributes |= {"namespace": namespace} if namespace else {}
    attributes |= {"name": name} if name else {}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
    }
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    return bool((await admin._request("POST", path, body=review))["status"].get("allowed"))


def binding(namespace: str, role: tuple[str, str], *subjects: dict[str, str]) -> dict[str, Any]:
    kind, name = role
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"probe-{name}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": list(subjects),
    }


def account(name: str, namespace: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


THE_WORKER = account("society-run-worker", "society-system")


async def dry_run_refused(kube: Kube, path: str, probe: dict[str, Any], by: str) -> None:
    """Until the API server enforces a policy (it loads policies asynchronously): a dry-run
    create of ``probe`` at ``path`` is refused with ``by`` in the reason."""
    with anyio.fail_after(60):
        while True:
            try:
                await kube._request("POST", path, query={"dryRun": "All"}, body=probe)
            except KubeError as exc:
                if by in str(exc):
                    return
            await anyio.sleep(0.2)


async def policy_enforced(admin: Kube, worker: Kube) -> None:
    """Until the API server enforces the chart's admission policy: a dry-run RoleBinding outside
    any run namespace is refused by it."""
    probe = binding("default", ("ClusterRole", RUN_NAMESPACE_ROLE), THE_WORKER)
    path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings"
    await dry_run_refused(worker, path, probe, "ValidatingAdmissionPolicy")


@pytest.fixture(scope="module")
async def worker_rights(control_plane: Plane) -> AsyncIterator[str]:
    """The chart's namespaces, ServiceAccount, roles, bindings and admission policies, applied
    by an administrator (``helm install -n society-system``); yields the kubeconfig."""
    kubeconfig = str(control_plane.kubeconfig)
    chart = [obj for obj in render() if obj["kind"] in CHART_KINDS]
    system = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "society-system"}}
    async with (
        Kube.connect(kubeconfig=kubeconfig) as admin,
        Kube.connect(kubeconfig=kubeconfig, impersonate=WORKER) as worker,
    ):
        for obj in [system, *chart]:
            await admin.apply(obj)
        try:
            await policy_enforced(admin, worker)
            yield kubeconfig
        finally:
            for obj in reversed([system, *chart]):
                meta = obj["metadata"]
                await admin.delete(obj["kind"], meta["name"], meta.get("namespace"))
            # the next module applies the chart again: its namespaces must be gone, not going
            with anyio.fail_after(120):
                for obj in (o for o in [system, *chart] if o["kind"] == "Namespace"):
                    await gone(admin, obj["metadata"]["name"])


async def gone(admin: Kube, namespace: str) -> None:
    """Until ``namespace`` is deleted (test teardown: a short poll)."""
    while True:
        if await admin.get("Namespace", namespace) is None:
            return
        await anyio.sleep(0.5)


def job(namespace: str) -> dict[str, Any]:
    manifest = controller_job(
        "sr-" + "0" * 32,
        image=PINNED,
        module_name="m.py",
        seed=None,
        profile="kubernetes",
        cluster_queue="q",
        active_deadline_s=60,
    )
    manifest["metadata"] = {"name": "rogue", "namespace": namespace}
    return manifest


def secret(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "rogue", "namespace": namespace},
        "stringData": {"k": "v"},
    }


RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io"
ANYWHERE = f"""
    get,list,watch,patch,update secrets; create pods pods/exec pods/attach pods/portforward
    serviceaccounts/token; patch pods/ephemeralcontainers; impersonate serviceaccounts;
    delete configmaps; create apps:deployments apps:daemonsets batch:cronjobs;
    create,escalate,patch,bind {RBAC}:roles
"""
"""Takeover rights the worker holds in no namespace, its own run namespace included: it reads no
Secret anywhere (in its run namespaces it may create and delete them, the signing key's and the
export token's, below)."""
OUTSIDE_ITS_RUNS = f"""
    create batch:jobs serviceaccounts; patch configmaps; delete {RBAC}:rolebindings;
    create,delete secrets; create networking.k8s.io:networkpolicies
"""
"""What a run needs, held only in run namespaces the worker created (and RoleBinding deletes in
the credentials namespace, which the admission policy limits to runs' credential bindings)."""
CLUSTER_WIDE = f"""
    delete,patch,update namespaces; create,escalate {RBAC}:clusterroles;
    create {RBAC}:clusterrolebindings; impersonate users groups; get nodes/proxy;
    create certificates.k8s.io:certificatesigningrequests persistentvolumes
    {ADMISSION}:validatingwebhookconfigurations {ADMISSION}:mutatingwebhookconfigurations
    apiextensions.k8s.io:customresourcedefinitions; delete {ADMISSION}:validatingadmissionpolicies;
    patch {ADMISSION}:validatingadmissionpolicybindings
"""


def takeover(table: str) -> list[tuple[str, str, str]]:
    """``verbs resources; ...`` as (verb, group, resource); ``group:resource`` names a group."""
    rights = []
    for clause in " ".join(table.split()).split(";"):
        verbs, *resources = clause.split()
        for verb in verbs.split(","):
            for resource in resources:
                group, _, plural = resource.rpartition(":")
                rights.append((verb, group, plural))
    return rights
