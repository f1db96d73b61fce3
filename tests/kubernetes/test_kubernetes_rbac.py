"""Least privilege on clusters: the run worker, as its ServiceAccount, runs a whole run and is
refused everything else; a cluster run's module travels as content; the worker pod runs no
``local`` profile.

Against the real control plane, with the Helm chart's RBAC and admission policies applied as
``helm install`` would (rendered by ``test_helm_chart.render``). The worker runs in this process
and acts as its ServiceAccount through impersonation (``SOCIETY_KUBE_IMPERSONATE``), which the
API server authorizes and admits exactly as that ServiceAccount's own requests. Test-only
substitution: ``pod_processes`` runs the controller Job's pod as a local process with a token of
the controller's ServiceAccount (KWOK pods run nothing).
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    PINNED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
)
from controlplane import ControlPlane
from pod_processes import PodProcesses
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from test_helm_chart import render
from test_kubernetes_incluster import controller_node, in_cluster_worker  # noqa: F401 (fixture)
from test_kubernetes_temporal import MODULE, run_society, temporal_address  # noqa: F401 (fixture)

from controller.platform.kubernetes import (
    Kube,
    KubeError,
    KubernetesSettings,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
    run_controller_job,
)
from controller.platform.kubernetes.access import controller_job
from controller.platform.kubernetes.controller_job import MODULE_DIGEST_ENV
from controller.platform.kubernetes.rbac import (
    CONTROLLER_ROLE,
    CREATED_BY,
    RUN_NAMESPACE_ROLE,
    WORKER_BINDING,
    credentials_binding_name,
    worker_subject,
)
from controller.platform.temporal.activities import LifecycleActivities
from controller.platform.temporal.workflow import EXECUTE
from controller.run import RunRequest, RunResult
from controller.run.module_source import MODULE_LIMIT, ModuleSource, ModuleSourceError
from controller.run.runid import new_run_id
from controller.run.spec import load_run_spec
from ledger import open_ledger_artifacts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

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
MARKED_MODULE = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
"""


async def forbidden(call: Coroutine[Any, Any, Any]) -> bool:
    """True when the API server refuses the call (403), by RBAC or by an admission policy."""
    try:
        await call
    except KubeError as exc:
        return exc.status == 403
    return False


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


async def policy_enforced(admin: Kube, worker: Kube) -> None:
    """Until the API server enforces the chart's admission policy (it loads policies
    asynchronously): a dry-run RoleBinding outside any run namespace is refused by it."""
    probe = binding("default", ("ClusterRole", RUN_NAMESPACE_ROLE), THE_WORKER)
    path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings"
    with anyio.fail_after(60):
        while True:
            try:
                await worker._request("POST", path, query={"dryRun": "All"}, body=probe)
            except KubeError as exc:
                if "ValidatingAdmissionPolicy" in str(exc):
                    return
            await anyio.sleep(0.2)


@pytest.fixture(scope="module")
async def worker_rights(control_plane: ControlPlane) -> AsyncIterator[str]:
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


async def test_the_run_worker_as_its_service_account_runs_a_whole_run_in_cluster(
    control_plane: ControlPlane,
    worker_rights: str,
    cluster_queue: str,
    controller_node: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=PINNED)))
    root = artifacts(tmp_path)
    in_cluster_worker(monkeypatch, control_plane, cluster_queue, controller_node)
    monkeypatch.setenv("SOCIETY_KUBE_IMPERSONATE", WORKER)
    credentials = credentials_binding_name(run_id)
    seen: dict[str, Any] = {}

    async with (
        Kube.connect(kubeconfig=worker_rights) as admin,
        PodProcesses.running(
            admin,
            run_id,
            role="controller",
            artifact_root=root,
            admin_kubeconfig=worker_rights,
            node=controller_node,
        ) as controllers,
    ):
        activities = LifecycleActivities()

        @activity.defn(name=EXECUTE)
        async def execute(request: RunRequest) -> RunResult:
            seen["namespace"] = await admin.get("Namespace", run_id)
            seen["binding"] = await admin.get("RoleBinding", WORKER_BINDING, run_id)
            seen["controller"] = await admin.get("RoleBinding", "society-controller", run_id)
            seen["credentials"] = await admin.get("RoleBinding", credentials, CREDENTIALS)
            return await activities.execute(request)

        request = RunRequest(
            module_path=str(tmp_path / "not-on-the-worker.py"),  # the worker reads no path
            module_source=ModuleSource.read(module),
            run_id=run_id,
            profile="kubernetes",
            artifact_root=str(root),
        )
        result = await run_society(temporal_address, request, activities, execute)
        left = await left_in_cluster(admin, run_id)
        credentials_left = await admin.get("RoleBinding", credentials, CREDENTIALS)

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    assert [entry.returncode for entry in controllers.started.values()] == [0]
    # prepare, as the worker: the namespace names its creator, and the worker bound itself there
    assert seen["namespace"]["metadata"]["annotations"][CREATED_BY] == WORKER
    assert seen["binding"]["roleRef"]["name"] == RUN_NAMESPACE_ROLE
    assert seen["binding"]["subjects"] == [THE_WORKER]
    assert seen["controller"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": CONTROLLER_ROLE,
    }
    assert seen["credentials"] is not None and credentials_left is None
    # cleanup, as the worker: the namespace and everything in it are gone
    assert left == []
    spec = load_run_spec(str(module))
    ledger = open_ledger_artifacts(
        spec.catalog,
        outcome.receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=outcome.receipt.public_key,
    )
    assert ledger is not None and outcome.receipt.complete


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
        try:
            attempts = {
                "create a Job in kube-system": worker.create(job("kube-system")),
                "create a Job in a namespace it did not create": worker.create(job(namespace)),
                "create a Job in a run namespace it did not create": worker.create(job(foreign)),
                "read a Secret in kube-system": worker.get("Secret", "rogue", "kube-system"),
                "list Secrets in its own run namespace": worker.list("Secret", own),
                "create a Secret in its own run namespace": worker.create(secret(own)),
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
    checks = [
        (verb, group, resource)
        for verb, group, resource in [
            *((verb, "", "secrets") for verb in ("get", "list", "watch", "create", "patch")),
            ("delete", "", "secrets"),
            ("create", "", "pods"),
            ("create", "", "pods/exec"),
            ("create", "", "pods/attach"),
            ("create", "", "pods/portforward"),
            ("patch", "", "pods/ephemeralcontainers"),
            ("create", "", "serviceaccounts/token"),
            ("impersonate", "", "serviceaccounts"),
            ("delete", "", "configmaps"),
            ("create", "apps", "deployments"),
            ("create", "apps", "daemonsets"),
            ("create", "batch", "cronjobs"),
            ("create", "rbac.authorization.k8s.io", "roles"),
            ("escalate", "rbac.authorization.k8s.io", "roles"),
            ("patch", "rbac.authorization.k8s.io", "roles"),
            ("bind", "rbac.authorization.k8s.io", "roles"),
        ]
    ]
    outside = [
        ("create", "batch", "jobs"),
        ("patch", "", "configmaps"),
        ("create", "", "serviceaccounts"),
        ("delete", "rbac.authorization.k8s.io", "rolebindings"),  # in credentials: its own
    ]
    cluster = [
        ("delete", "", "namespaces"),
        ("patch", "", "namespaces"),
        ("update", "", "namespaces"),
        ("create", "rbac.authorization.k8s.io", "clusterroles"),
        ("escalate", "rbac.authorization.k8s.io", "clusterroles"),
        ("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
        ("impersonate", "", "users"),
        ("impersonate", "", "groups"),
        ("create", "certificates.k8s.io", "certificatesigningrequests"),
        ("get", "", "nodes/proxy"),
        ("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("delete", "admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("patch", "admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
        ("create", "apiextensions.k8s.io", "customresourcedefinitions"),
        ("create", "", "persistentvolumes"),
    ]
    async with (
        Kube.connect(kubeconfig=worker_rights) as admin,
        Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker,
    ):
        await prepare_run_namespace(worker, own)

        async def allowed(
            verb: str, group: str, resource: str, namespace: str = "", name: str = ""
        ) -> bool:
            kind, _, subresource = resource.partition("/")
            attributes = {"verb": verb, "group": group, "resource": kind}
            attributes |= {"subresource": subresource} if subresource else {}
            attributes |= {"namespace": namespace} if namespace else {}
            attributes |= {"name": name} if name else {}
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": WORKER, "groups": WORKER_GROUPS, "resourceAttributes": attributes},
            }
            path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
            return bool((await admin._request("POST", path, body=review))["status"].get("allowed"))

        try:
            granted = [
                f"{verb} {resource} in {where}"
                for where in (
                    "kube-system",
                    "default",
                    "society-system",
                    CREDENTIALS,
                    namespace,
                    own,
                )
                for verb, group, resource in checks
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
                for where in ("kube-system", "default", "society-system", CREDENTIALS, namespace)
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


async def test_a_cluster_run_never_reads_a_path_on_the_worker_and_refuses_altered_content(
    worker_rights: str, tmp_path: Path
) -> None:
    """The old worker read any local file named by ``module_path`` and published it to the run's
    namespace in a ConfigMap; now only content the submitter sent travels, checked by digest."""
    private = tmp_path / "worker-private.py"
    private.write_text("TOKEN = 'worker-local secret'\n")
    run_id = new_run_id()
    settings = KubernetesSettings(
        kubeconfig=worker_rights,
        impersonate=WORKER,
        controller_job=True,
        controller_image=PINNED,
    )
    source = ModuleSource.read(private)
    altered = source.model_copy(update={"content": "run_spec = 'altered'\n"})
    async with Kube.connect(kubeconfig=worker_rights, impersonate=WORKER) as worker:
        await prepare_run_namespace(worker, run_id)
        try:
            reasons = []
            for module_source in (None, altered):
                request = RunRequest(
                    module_path=str(private),
                    module_source=module_source,
                    run_id=run_id,
                    profile="kubernetes",
                    artifact_root=str(tmp_path),
                )
                with anyio.fail_after(30):
                    try:
                        await run_controller_job(request, settings)
                    except Exception as error:
                        reasons.append(getattr(error, "reason", repr(error)))
            published = await worker.get("ConfigMap", "society-runspec", run_id)
            job_made = await worker.get("Job", "society-controller", run_id)
        finally:
            await delete_run_namespace(worker, run_id)
    assert reasons == ["module-source-missing", "module-digest-mismatch"]
    assert published is None and job_made is None


async def test_the_worker_pod_refuses_a_local_profile_run_before_anything_is_created(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone who can reach the worker's task queue chooses the profile: ``local`` would import
    and run the module inside the worker pod, as the worker's ServiceAccount."""
    marker = tmp_path / "imported"
    module = tmp_path / "experiment.py"
    module.write_text(MARKED_MODULE.format(marker=str(marker)))
    root = artifacts(tmp_path)
    monkeypatch.setenv("SOCIETY_KUBE_IN_CLUSTER", "1")  # what the chart's Deployment sets
    activities = LifecycleActivities()
    request = RunRequest(
        module_path=str(module), run_id=new_run_id(), profile="local", artifact_root=str(root)
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await run_society(temporal_address, request, activities, activities.execute)
    cause = failure.value.cause
    assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError)
    assert cause.cause.type == "local-profile-in-cluster"
    assert cause.cause.non_retryable
    assert "society run" in cause.cause.message  # the next step
    assert not marker.exists()
    assert list(root.iterdir()) == []


def test_the_controller_imports_a_mounted_module_only_when_it_matches_its_digest(
    tmp_path: Path,
) -> None:
    """The ConfigMap could be replaced between the worker's create and the pod's mount."""
    marker = tmp_path / "imported"
    mounted = tmp_path / "runspec" / "experiment.py"
    mounted.parent.mkdir()
    sent = "run_spec = None\n"  # what the submitter sent, and the digest the Job carries
    mounted.write_text(MARKED_MODULE.format(marker=str(marker)))  # what the pod finds mounted
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SOCIETY_")},
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "SOCIETY_RUN_ID": new_run_id(),
        "SOCIETY_RUN_MODULE": str(mounted),
        MODULE_DIGEST_ENV: hashlib.sha256(sent.encode()).hexdigest(),
        "SOCIETY_PROFILE": "kubernetes",
        "SOCIETY_ARTIFACT_ROOT": str(tmp_path / "artifacts"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "controller.platform.kubernetes.incluster"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["controller"] == "refused" and line["reason"] == "module-digest-mismatch"
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def test_a_module_that_cannot_travel_is_refused_with_a_typed_reason(tmp_path: Path) -> None:
    """What ``society run --profile <cluster>`` reports instead of a traceback."""
    cases = {
        "a b.py": (b"run_spec = None\n", "module-name-invalid"),
        "big.py": (b"#" * (MODULE_LIMIT + 1), "module-too-large"),
        "binary.py": (b"\xff\xfe", "module-not-text"),
    }
    reasons = {}
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ModuleSourceError) as refused:
            ModuleSource.read(tmp_path / name)
        reasons[name] = refused.value.reason
    assert reasons == {name: reason for name, (_, reason) in cases.items()}
    (tmp_path / "my-experiment.py").write_text("run_spec = None\n")
    sent = ModuleSource.read(tmp_path / "my-experiment.py")
    assert sent.verified() == "run_spec = None\n"
    assert sent.sha256 == hashlib.sha256(b"run_spec = None\n").hexdigest()
