"""Least privilege on clusters: the run worker, as its ServiceAccount, is refused everything
outside what a run needs (the whole run it does: ``node/test_worker_identity``; module content
and the worker pod's refusals: ``test_kubernetes_module_source``).

Against the real control plane, with the Helm chart's RBAC and admission policies applied as
``helm install`` would (``rbac_support``). The worker runs in this process
and acts as its ServiceAccount through impersonation (``SOCIETY_KUBE_IMPERSONATE``), which the
API server authorizes and admits exactly as that ServiceAccount's own requests. An agent's
identity, impersonated the same way, reads no Secret in its run namespace.
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

from typing import Any

import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    PINNED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
)
from rbac_support import (  # noqa: F401 (fixture)
    ANYWHERE,
    CLUSTER_WIDE,
    CREDENTIALS,
    OUTSIDE_ITS_RUNS,
    THE_WORKER,
    WORKER,
    WORKER_GROUPS,
    account,
    account_groups,
    binding,
    dry_run_refused,
    forbidden,
    job,
    reviewed_allowed,
    secret,
    takeover,
    worker_rights,
)
from worker_rights import SIGNING_KEY_POLICY

from controller.incluster.access import SIGNING_SECRET, signing_key_secret
from controller.incluster.export_job import TOKEN_SECRET, token_secret
from controller.ops.checks.sample_objects import sample_run_objects
from controller.platforms.kubernetes import (
    Kube,
    KubeError,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
)
from controller.platforms.kubernetes.rbac import (
    CONTROLLER_ROLE,
    CREATED_BY,
    RUN_NAMESPACE_ROLE,
    WORKER_BINDING,
    controller_subject,
)
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_the_run_worker_is_refused_everything_outside_the_run_namespaces_it_created(
    worker_rights: str, namespace: str
) -> None:
    """Each attempt is one the old ClusterRole allowed, or one an admission policy must stop
    because RBAC alone cannot (cluster-wide ``create`` on RoleBindings and namespaces)."""
    own, foreign = new_run_id(), new_run_id()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rogue", "namespace": own},
        "spec": {"containers": [{"name": "x", "image": PINNED}]},
    }
    exec_args: dict[str, Any] = {"container": "x", "command": ["true"], "limit_bytes": 10}
    run_role, controller_role = (
        ("ClusterRole", RUN_NAMESPACE_ROLE),
        ("ClusterRole", CONTROLLER_ROLE),
    )
    impostor = objects.namespace(new_run_id())
    impostor["metadata"]["annotations"] = {CREATED_BY: "someone-else"}
    async with (
        Kube.connect(kubeconfig=worker_rights) as admin,
        Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker,
    ):
        await prepare_run_namespace(worker, own, credentials_namespace=CREDENTIALS)
        # a run namespace the worker did not create: labelled as a run's, created by an admin
        await prepare_run_namespace(admin, foreign)

        async def created_then_read() -> Any:
            # it may write a Secret where its runs need one, but never read one back
            assert not await forbidden(worker.create(secret(own)))
            return await worker.get("Secret", "rogue", own)

        try:
            attempts = {
                "create a Job in kube-system": worker.create(job("kube-system")),
                "create a Job in a namespace it did not create": worker.create(job(namespace)),
                "create a Job in a run namespace it did not create": worker.create(job(foreign)),
                "read a Secret in kube-system": worker.get("Secret", "rogue", "kube-system"),
                "list Secrets in its own run namespace": worker.list("Secret", own),
                "create a Secret in a run namespace it did not create": worker.create(
                    secret(foreign)
                ),
                "read back a Secret it created in its own run namespace": created_then_read(),
                "patch a Secret in another namespace": worker.apply(secret(namespace)),
                "create a Pod in its own run namespace": worker.create(pod),
                "exec in a pod in kube-system": worker.exec("rogue", "kube-system", **exec_args),
                "exec in a pod in its own run namespace": worker.exec("rogue", own, **exec_args),
                "create a Role in its own run namespace": worker.create(
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "Role",
                        "metadata": {"name": "rogue", "namespace": own},
                        "rules": [],
                    }
                ),
                "bind itself in kube-system": worker.create(
                    binding("kube-system", run_role, THE_WORKER)
                ),
                "bind itself in a namespace it did not create": worker.create(
                    binding(namespace, run_role, THE_WORKER)
                ),
                "bind itself in a run namespace it did not create": worker.create(
                    binding(foreign, run_role, THE_WORKER)
                ),
                "bind itself to the controller's rights": worker.create(
                    binding(own, controller_role, THE_WORKER)
                ),
                "bind another account to its own rights": worker.create(
                    binding(own, run_role, account("default", own))
                ),
                "bind a foreign account to the controller's rights": worker.create(
                    binding(own, controller_role, account("default", "kube-system"))
                ),
                "bind itself to cluster-admin in its run namespace": worker.create(
                    binding(own, ("ClusterRole", "cluster-admin"), THE_WORKER)
                ),
                "bind itself to the credentials reader": worker.create(
                    binding(CREDENTIALS, ("Role", "society-credentials-reader"), THE_WORKER)
                ),
                "unbind itself from the credentials namespace": worker.delete(
                    "RoleBinding", WORKER_BINDING, CREDENTIALS
                ),
                "create a namespace that is not a run's": worker.create(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rogue-ns"}}
                ),
                "create a run namespace naming another creator": worker.create(impostor),
                "delete a namespace it did not create": worker.delete("Namespace", namespace),
                "delete a run namespace it did not create": worker.delete("Namespace", foreign),
                "relabel kube-system": worker.apply(
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": "kube-system", "labels": {"x": "y"}},
                    }
                ),
                "remove its admission policy": worker.delete(
                    "ValidatingAdmissionPolicyBinding", "society-run-worker"
                ),
                "widen its ClusterRole": worker.apply(
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRole",
                        "metadata": {"name": "society-run-worker"},
                        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
                    }
                ),
            }
            allowed = [what for what, call in attempts.items() if not await forbidden(call)]
            assert allowed == []
            # ... while in its own run namespace it does what a run needs
            assert not await forbidden(worker.create(job(own)))
            assert await admin.get("Job", "rogue", own) is not None
        finally:
            await delete_run_namespace(worker, own, credentials_namespace=CREDENTIALS)
            await delete_run_namespace(admin, foreign)
            await admin.delete("Namespace", "rogue-ns")  # only if the worker could create it
        assert await left_in_cluster(admin, own) == []


async def test_no_right_outside_the_list_is_granted_to_the_run_worker_anywhere(
    worker_rights: str, namespace: str
) -> None:
    """SubjectAccessReviews (RBAC only) across namespaces, for the verbs a takeover needs."""
    own = new_run_id()
    anywhere = takeover(ANYWHERE)
    outside = takeover(OUTSIDE_ITS_RUNS)
    cluster = takeover(CLUSTER_WIDE)
    async with (
        Kube.connect(kubeconfig=worker_rights) as admin,
        Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker,
    ):
        await prepare_run_namespace(worker, own)

        async def allowed(
            verb: str, group: str, resource: str, namespace: str = "", name: str = ""
        ) -> bool:
            return await reviewed_allowed(
                admin, WORKER, WORKER_GROUPS, verb, group, resource, namespace, name
            )

        try:
            everywhere = ("kube-system", "default", "society-system", CREDENTIALS, namespace)
            granted = [
                f"{verb} {resource} in {where}"
                for where in (*everywhere, own)
                for verb, group, resource in anywhere
                if await allowed(verb, group, resource, where)
            ]
            granted += [
                f"{verb} {resource} in {where}"
                for where in ("kube-system", "default", namespace)
                for verb, group, resource in outside
                if await allowed(verb, group, resource, where)
            ]
            granted += [
                f"delete namespace {where}"
                for where in everywhere
                if await allowed("delete", "", "namespaces", where, name=where)
            ]
            granted += [
                f"{verb} {resource} cluster-wide"
                for verb, group, resource in cluster
                if await allowed(verb, group, resource)
            ]
            granted += [
                f"bind {name}"
                for name in ("cluster-admin", "admin", "edit", "system:controller:job-controller")
                if await allowed("bind", "rbac.authorization.k8s.io", "clusterroles", own, name)
            ]
            assert granted == []
            # the reviews can say yes: the worker's own run namespace grants what a run needs
            assert await allowed("create", "batch", "jobs", own)
            assert await allowed("delete", "", "namespaces", own, name=own)
        finally:
            await delete_run_namespace(worker, own)


def agent_identity(run_id: str) -> str:
    """The user an agent's pod acts as, read from the Sandboxes the platform writes for a run
    (no ``serviceAccountName``: the namespace's ``default``), which mount no token."""
    pods = [
        obj["spec"]["podTemplate"]["spec"]
        for obj in sample_run_objects(run_id)
        if obj["kind"] == "Sandbox"
    ]
    assert pods and all(pod["automountServiceAccountToken"] is False for pod in pods)
    accounts = {
        pod.get("serviceAccountName") or pod.get("serviceAccount") or "default" for pod in pods
    }
    assert len(accounts) == 1, accounts
    return f"system:serviceaccount:{run_id}:{accounts.pop()}"


def held_secret(run_id: str, name: str) -> dict[str, Any]:
    """The Secret ``name`` as the platform writes it."""
    if name == TOKEN_SECRET:
        return token_secret(run_id, "ya29.a-downscoped-token")
    return signing_key_secret(run_id, b"-----BEGIN PRIVATE KEY-----\n")


@pytest.mark.parametrize("name", [SIGNING_SECRET, TOKEN_SECRET])
async def test_an_agents_identity_reads_no_secret_in_its_run_namespace(
    worker_rights: str, name: str
) -> None:
    """Were an agent to get its ServiceAccount's token (none is mounted), the API server would
    still refuse it the run's Secrets: the operator's signing key, the export Job's token, and
    the operator's credentials."""
    own = new_run_id()
    agent = agent_identity(own)
    async with (
        Kube.connect(kubeconfig=worker_rights) as admin,
        Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker,
        Kube.connect(kubeconfig=worker_rights, impersonate=agent) as as_agent,
    ):
        owner = await prepare_run_namespace(worker, own, credentials_namespace=CREDENTIALS)
        try:
            await admin.create(objects.owned(held_secret(own, name), owner))
            assert await admin.get("Secret", name, own) is not None  # there to be read

            async def watch() -> None:
                async for _ in as_agent.watch("Secret", own, resource_version="0", timeout_s=1):
                    return

            attempts = {
                f"get {name}": as_agent.get("Secret", name, own),
                "list Secrets in its run namespace": as_agent.list("Secret", own),
                "watch Secrets in its run namespace": watch(),
                "list Secrets in the credentials namespace": as_agent.list("Secret", CREDENTIALS),
            }
            allowed = [what for what, call in attempts.items() if not await forbidden(call)]
            assert allowed == []
            groups = account_groups(own)
            reviewed = [
                f"{verb} {target or 'secrets'} in {where}"
                for where in (own, CREDENTIALS)
                for verb, target in (("get", name), ("list", ""), ("watch", ""))
                if await reviewed_allowed(admin, agent, groups, verb, "", "secrets", where, target)
            ]
            assert reviewed == []
            # the reviews can say yes: the run's controller writes its agents' Secrets there
            controller = controller_subject(own)
            assert await reviewed_allowed(admin, controller, groups, "create", "", "secrets", own)
        finally:
            await delete_run_namespace(worker, own, credentials_namespace=CREDENTIALS)
        assert await left_in_cluster(admin, own) == []


def _holding_the_key(run_id: str, name: str, how: str) -> dict[str, Any]:
    """A pod of ``run_id`` that references the operator key's Secret ``how``: as a volume, a
    projected volume's source, or an environment variable."""
    container: dict[str, Any] = {
        "name": "x",
        "image": PINNED,
        "securityContext": objects.restricted_container(),  # the namespace's Pod Security passes
    }
    volumes: list[dict[str, Any]] = []
    if how == "volume":
        volumes = [{"name": "k", "secret": {"secretName": SIGNING_SECRET}}]
    elif how == "projected":
        volumes = [{"name": "k", "projected": {"sources": [{"secret": {"name": SIGNING_SECRET}}]}}]
    else:
        reference = {"secretKeyRef": {"name": SIGNING_SECRET, "key": "key.pem"}}
        container["env"] = [{"name": "KEY", "valueFrom": reference}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": run_id},
        "spec": {
            "securityContext": objects.restricted_pod(),
            "containers": [container],
            "volumes": volumes,
        },
    }


async def _exec_answer(kube: Kube, pod: str, namespace: str, container: str) -> str:
    """The API server's answer to an exec request without the stream upgrade: its status and
    reason (admission refuses before it would ask for the upgrade)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/exec"
    query = {"container": container, "command": "true", "stdout": "true"}
    try:
        await kube._request("POST", path, query=query)
    except KubeError as exc:
        return f"{exc.status} {exc}"
    return "200"


async def test_no_pod_but_a_jobs_mounts_the_signing_key_and_no_account_execs_into_the_controller(
    worker_rights: str,
) -> None:
    """A hostile module runs with the run's controller account, which may create Sandboxes (so
    pods) and exec into its run's pods: the chart's ``society-run-signing-key`` policy refuses
    it the two ways to the operator key that the controller Job's signer container holds."""
    own = new_run_id()
    controller_pod = "society-controller-x7k2p"
    async with (
        Kube.connect(kubeconfig=worker_rights) as admin,
        Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker,
        Kube.connect(
            kubeconfig=worker_rights, impersonate="system:serviceaccount:kube-system:job-controller"
        ) as jobs,
        Kube.connect(kubeconfig=worker_rights, impersonate=controller_subject(own)) as controller,
    ):
        owner = await prepare_run_namespace(worker, own, credentials_namespace=CREDENTIALS)
        try:
            await admin.create(objects.owned(held_secret(own, SIGNING_SECRET), owner))
            pods, probe = f"/api/v1/namespaces/{own}/pods", _holding_the_key(own, "probe", "volume")
            await dry_run_refused(admin, pods, probe, SIGNING_KEY_POLICY)
            for how in ("volume", "projected", "environment"):
                with pytest.raises(KubeError) as refused:
                    await admin.create(_holding_the_key(own, f"thief-{how}", how))
                assert refused.value.status == 403, how
                assert "society-signing-key (the operator's signing key)" in str(refused.value)
            # the Job controller makes the controller Job's pod, whose signer mounts the key
            await jobs.create(_holding_the_key(own, controller_pod, "volume"))
            # RBAC lets the controller exec in its namespace's pods (harvest does, in its agents')
            allowed = await reviewed_allowed(
                admin, controller_subject(own), account_groups(own), "create", "", "pods/exec", own
            )
            assert allowed
            refused_exec = await _exec_answer(controller, controller_pod, own, "signer")
            assert refused_exec.startswith("403") and "into a run's controller pod" in refused_exec
            assert "into a run's controller pod" not in await _exec_answer(
                controller, "agent-alice", own, "agent"
            )
        finally:
            await delete_run_namespace(worker, own)
