"""What the Helm chart must install for the run worker, stated from the code's constants: its
roles, their bindings, and the admission policies that confine its cluster-wide ``create`` to the
namespaces it created. The chart (``helm/society-runner/templates/rbac.yaml``) is what a cluster
gets; ``tests/kubernetes/test_helm_chart.py`` checks it equals these objects.

RBAC cannot say "only in namespaces this identity created", so two ValidatingAdmissionPolicies
say it (``failurePolicy: Fail``):

* ``society-run-namespaces`` (every user): a namespace annotated ``society.run/created-by`` names
  its creator at creation, and the annotation never changes or appears later.
* ``society-run-worker`` (the worker only): it creates only run namespaces (``sr-<32 hex>``,
  labelled as runs) and RoleBindings only in run namespaces it created (itself to
  ``society-run-namespace``, the run's controller to ``society-run-controller``), in the
  credentials namespace (a run's controller to the credentials reader, named for the run) and in
  the warm namespace (a run's controller to the warm claimer, named for the run).

A third, ``society-run-signing-key`` (every user, run namespaces only), keeps the operator's key
from a hostile module that acts as its run's controller: only the Job controller may make a pod
that references the key's Secret, and no ServiceAccount may exec, attach or port-forward into a
controller pod (``signing_key_policy``).
"""

from __future__ import annotations

from controller.incluster.access import CONTROLLER_JOB, SIGNING_SECRET
from controller.platforms.kubernetes.kube import Obj
from controller.platforms.kubernetes.objects import CONTROLLER_ACCOUNT, MANAGED_BY, RUN_LABEL
from controller.platforms.kubernetes.rbac import (
    CONTROLLER_ROLE,
    CREATED_BY,
    CREDENTIALS_READER,
    RBAC,
    RUN_NAMESPACE_ROLE,
    SYSTEM_NAMESPACE,
    WARM_CLAIMER,
    WORKER_ACCOUNT,
    WORKER_BINDING,
    WORKER_CLUSTER_ROLE,
    WORKER_CREDENTIALS_RULES,
    WORKER_RULES,
    WORKER_WARM_RULES,
    _cluster_object,
    _namespaced,
    _role_ref,
    account_subject,
    run_cluster_roles,
    worker_subject,
)
from controller.platforms.kubernetes.warm import WARM_NAMESPACE

ADMISSION = "admissionregistration.k8s.io"
WORKER_POLICY = "society-run-worker"
NAMESPACES_POLICY = "society-run-namespaces"
SIGNING_KEY_POLICY = "society-run-signing-key"
RUN_ID_PATTERN = "^sr-[0-9a-f]{32}$"
JOB_CONTROLLERS = (
    "system:serviceaccount:kube-system:job-controller",
    "system:kube-controller-manager",
)
"""Who creates a Job's pods: the Job controller's own account, or the controller manager's where
it runs without per-controller credentials."""


def worker_objects(
    namespace: str = SYSTEM_NAMESPACE, credentials_namespace: str = "society-credentials"
) -> list[Obj]:
    """Everything that gives the run worker (ServiceAccount in ``namespace``) its rights."""
    worker = account_subject(WORKER_ACCOUNT, namespace)
    return [
        _cluster_object("ClusterRole", WORKER_CLUSTER_ROLE, rules=WORKER_RULES),
        _cluster_object(
            "ClusterRoleBinding",
            WORKER_CLUSTER_ROLE,
            roleRef=_role_ref("ClusterRole", WORKER_CLUSTER_ROLE),
            subjects=[worker],
        ),
        *run_cluster_roles(),
        _namespaced("Role", WORKER_BINDING, credentials_namespace, rules=WORKER_CREDENTIALS_RULES),
        _namespaced(
            "RoleBinding",
            WORKER_BINDING,
            credentials_namespace,
            roleRef=_role_ref("Role", WORKER_BINDING),
            subjects=[worker],
        ),
        _namespaced("Role", WORKER_BINDING, WARM_NAMESPACE, rules=WORKER_WARM_RULES),
        _namespaced(
            "RoleBinding",
            WORKER_BINDING,
            WARM_NAMESPACE,
            roleRef=_role_ref("Role", WORKER_BINDING),
            subjects=[worker],
        ),
        namespaces_policy(),
        _policy_binding(NAMESPACES_POLICY),
        worker_policy(worker_subject(namespace), credentials_namespace),
        _policy_binding(WORKER_POLICY),
        signing_key_policy(),
        _policy_binding(SIGNING_KEY_POLICY),
    ]


def _admission(kind: str, name: str, spec: Obj) -> Obj:
    metadata = {"name": name, "labels": dict(MANAGED_BY)}
    return {"apiVersion": f"{ADMISSION}/v1", "kind": kind, "metadata": metadata, "spec": spec}


def _policy_binding(policy: str) -> Obj:
    spec = {"policyName": policy, "validationActions": ["Deny"]}
    return _admission("ValidatingAdmissionPolicyBinding", policy, spec)


def _resources(group: str, resource: str, *operations: str) -> Obj:
    return {
        "apiGroups": [group],
        "apiVersions": ["*"],
        "operations": list(operations),
        "resources": [resource],
    }


def _has(obj: str, field: str, key: str) -> str:
    found = f"{obj}.metadata.{field}"
    return f"has({found}) && '{key}' in {found}"


def _equals(obj: str, field: str, key: str, value: str) -> str:
    return f"{_has(obj, field, key)} && {obj}.metadata.{field}['{key}'] == {value}"


def namespaces_policy() -> Obj:
    """For every user: ``society.run/created-by`` names the namespace's creator, for good."""
    created_by = f"object.metadata.annotations['{CREATED_BY}']"
    return _admission(
        "ValidatingAdmissionPolicy",
        NAMESPACES_POLICY,
        {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [_resources("", "namespaces", "CREATE", "UPDATE")]
            },
            "matchConditions": [
                {
                    "name": "annotated-now-or-before",
                    "expression": f"({_has('object', 'annotations', CREATED_BY)}) || "
                    f"(oldObject != null && {_has('oldObject', 'annotations', CREATED_BY)})",
                }
            ],
            "validations": [
                {
                    "expression": "request.operation != 'CREATE' || "
                    f"{created_by} == request.userInfo.username",
                    "message": f"{CREATED_BY} must name the user who creates the namespace",
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.operation != 'UPDATE' || ("
                    f"{_has('oldObject', 'annotations', CREATED_BY)} && "
                    f"{_has('object', 'annotations', CREATED_BY)} && {created_by} == "
                    f"oldObject.metadata.annotations['{CREATED_BY}'])",
                    "message": f"{CREATED_BY} is set when the namespace is created and never "
                    f"changes",
                    "reason": "Forbidden",
                },
            ],
        },
    )


def worker_policy(worker: str, credentials_namespace: str) -> Obj:
    """For the worker (user name ``worker``): where its namespaces and RoleBindings may land."""
    run_namespace = (
        f"namespaceObject != null && namespaceObject.metadata.name.matches('{RUN_ID_PATTERN}') && "
        + _equals("namespaceObject", "labels", RUN_LABEL, "namespaceObject.metadata.name")
        + " && "
        + _equals("namespaceObject", "annotations", CREATED_BY, "request.userInfo.username")
    )
    is_self = "'system:serviceaccount:' + s.namespace + ':' + s.name == request.userInfo.username"
    account = "s.kind == 'ServiceAccount' && has(s.namespace)"
    subjects = "has(variables.binding.subjects) && variables.binding.subjects.all(s, {})"
    run_binding = (
        f"variables.binding.roleRef.kind == 'ClusterRole' && ("
        f"(variables.binding.roleRef.name == '{RUN_NAMESPACE_ROLE}' && "
        + subjects.format(f"{account} && {is_self}")
        + f") || (variables.binding.roleRef.name == '{CONTROLLER_ROLE}' && "
        + subjects.format(
            f"{account} && s.name == '{CONTROLLER_ACCOUNT}' && "
            "s.namespace == namespaceObject.metadata.name"
        )
        + "))"
    )

    def controller_to(role: str) -> str:
        """A run's controller bound to ``role`` (a Role), as ``<role>-<run id>``."""
        return (
            f"variables.binding.roleRef.kind == 'Role' && "
            f"variables.binding.roleRef.name == '{role}' && "
            + subjects.format(
                f"{account} && s.name == '{CONTROLLER_ACCOUNT}' && "
                f"s.namespace.matches('{RUN_ID_PATTERN}') && "
                f"variables.binding.metadata.name == '{role}-' + s.namespace"
            )
        )

    credentials_binding = controller_to(CREDENTIALS_READER)
    validations = [
        (
            "request.resource.resource != 'namespaces' || "
            f"(object.metadata.name.matches('{RUN_ID_PATTERN}') && "
            + _equals("object", "labels", RUN_LABEL, "object.metadata.name")
            + " && "
            + _equals("object", "labels", "app.kubernetes.io/managed-by", "'society-runner'")
            + ")",
            "the run worker creates only run namespaces: sr-<32 hex>, labelled society.run/id "
            "with their name and app.kubernetes.io/managed-by=society-runner",
        ),
        (
            "request.resource.resource != 'rolebindings' || "
            "(variables.runNamespace && request.operation != 'DELETE') || variables.credentials "
            "|| variables.warm",
            "the run worker binds roles only in the run namespaces it created, the credentials "
            "namespace and the warm namespace",
        ),
        (
            "request.resource.resource != 'rolebindings' || !variables.runNamespace || "
            f"({run_binding})",
            f"in a run namespace the run worker binds only itself to {RUN_NAMESPACE_ROLE} and the "
            f"run's {CONTROLLER_ACCOUNT} ServiceAccount to {CONTROLLER_ROLE}",
        ),
        (
            "request.resource.resource != 'rolebindings' || !variables.credentials || "
            f"({credentials_binding})",
            f"in the credentials namespace the run worker binds only a run's "
            f"{CONTROLLER_ACCOUNT} ServiceAccount to {CREDENTIALS_READER}, "
            f"as {CREDENTIALS_READER}-<run id>",
        ),
        (
            "request.resource.resource != 'rolebindings' || !variables.warm || "
            f"({controller_to(WARM_CLAIMER)})",
            f"in the warm namespace the run worker binds only a run's {CONTROLLER_ACCOUNT} "
            f"ServiceAccount to {WARM_CLAIMER}, as {WARM_CLAIMER}-<run id>",
        ),
    ]
    return _admission(
        "ValidatingAdmissionPolicy",
        WORKER_POLICY,
        {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    _resources("", "namespaces", "CREATE"),
                    _resources(RBAC, "rolebindings", "CREATE", "UPDATE", "DELETE"),
                ]
            },
            "matchConditions": [
                {
                    "name": "the-run-worker",
                    "expression": f"request.userInfo.username == '{worker}'",
                }
            ],
            "variables": [
                {
                    "name": "binding",
                    "expression": "request.operation == 'DELETE' ? oldObject : object",
                },
                {"name": "runNamespace", "expression": run_namespace},
                {
                    "name": "credentials",
                    "expression": "namespaceObject != null && "
                    f"namespaceObject.metadata.name == '{credentials_namespace}'",
                },
                {
                    "name": "warm",
                    "expression": "namespaceObject != null && "
                    f"namespaceObject.metadata.name == '{WARM_NAMESPACE}'",
                },
            ],
            "validations": [
                {"expression": expression, "message": message, "reason": "Forbidden"}
                for expression, message in validations
            ],
        },
    )


def signing_key_policy() -> Obj:
    """In run namespaces, for every user: only a Job's pod (the controller Job's, whose signer
    container alone mounts it) may reference the operator key's Secret, and no ServiceAccount
    may exec, attach or port-forward into a controller pod. The controller's account may create
    Sandboxes (so pods) and exec into its run's pods; without this policy a hostile module, which
    runs with that account, could mount the key in a pod of its own or read it in the signer's
    container."""
    secret = f"'{SIGNING_SECRET}'"
    containers = (
        "object.spec.containers"
        " + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
    )
    in_volumes = (
        "has(object.spec.volumes) && object.spec.volumes.exists(v, "
        f"(has(v.secret) && v.secret.secretName == {secret}) || "
        f"(has(v.projected) && has(v.projected.sources) && v.projected.sources.exists(p, "
        f"has(p.secret) && p.secret.name == {secret})))"
    )
    in_environment = (
        f"({containers}).exists(c, "
        f"(has(c.env) && c.env.exists(e, has(e.valueFrom) && has(e.valueFrom.secretKeyRef) && "
        f"e.valueFrom.secretKeyRef.name == {secret})) || "
        "(has(c.envFrom) && c.envFrom.exists(f, has(f.secretRef) && "
        f"f.secretRef.name == {secret})))"
    )
    job_controllers = ", ".join(f"'{name}'" for name in JOB_CONTROLLERS)
    return _admission(
        "ValidatingAdmissionPolicy",
        SIGNING_KEY_POLICY,
        {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    _resources("", "pods", "CREATE"),
                    _resources("", "pods/exec", "CONNECT"),
                    _resources("", "pods/attach", "CONNECT"),
                    _resources("", "pods/portforward", "CONNECT"),
                ]
            },
            "matchConditions": [
                {
                    "name": "a-run-namespace",  # (match conditions see no namespaceObject)
                    "expression": f"request.namespace.matches('{RUN_ID_PATTERN}')",
                }
            ],
            "validations": [
                {
                    "expression": "request.operation != 'CREATE' || "
                    f"request.userInfo.username in [{job_controllers}] || "
                    f"!({in_volumes} || {in_environment})",
                    "message": f"in a run namespace only the controller Job's pod may reference "
                    f"the Secret {SIGNING_SECRET} (the operator's signing key)",
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.operation != 'CONNECT' || "
                    f"!request.name.startsWith('{CONTROLLER_JOB}-') || "
                    "!request.userInfo.username.startsWith('system:serviceaccount:')",
                    "message": "no ServiceAccount may exec, attach or port-forward into a run's "
                    "controller pod, whose signer container holds the operator's signing key",
                    "reason": "Forbidden",
                },
            ],
        },
    )
