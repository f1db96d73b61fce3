"""The Helm chart and the kind config: rendered by the pinned helm, the chart must pin every image
by digest and grant exactly the rules the code grants (so chart and code cannot drift).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from cp_build import read_versions
from worker_rights import worker_objects

from controller.incluster.access import worker_deployment
from controller.ops.checks.tools import tool
from controller.platforms.kubernetes.rbac import credentials_reader_role, warm_claimer_role
from controller.platforms.kubernetes.warm import WARM_NAMESPACE

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "society-runner"
DIGEST_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def render(namespace: str = "society-system", **values_set: Any) -> list[dict[str, Any]]:
    """The chart's objects rendered by the pinned ``helm template`` with the default values,
    changed by ``values_set`` (a values file layered last, like ``helm -f``)."""
    with tempfile.TemporaryDirectory() as scratch:
        values = Path(scratch) / "values.yaml"
        values.write_text(yaml.safe_dump(values_set))
        argv = [str(tool("helm")), "template", "society-runner", str(CHART)]
        argv += ["--namespace", namespace, "-f", str(values)]
        done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def images(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        found = [obj["image"]] if isinstance(obj.get("image"), str) else []
        return found + [image for value in obj.values() for image in images(value)]
    if isinstance(obj, list):
        return [image for value in obj for image in images(value)]
    return []


def test_the_chart_renders_to_objects_that_parse_and_pin_every_image_by_digest() -> None:
    objects = render()
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    assert kinds == [
        "ClusterQueue/society-agents",
        "ClusterRole/society-run-controller",
        "ClusterRole/society-run-namespace",
        "ClusterRole/society-run-worker",
        "ClusterRoleBinding/society-run-worker",
        "Deployment/society-run-worker",
        "Namespace/society-credentials",
        "Namespace/society-warm",
        "ResourceFlavor/society-agents",
        "Role/society-credentials-reader",
        "Role/society-run-worker",
        "Role/society-run-worker",
        "Role/society-warm-claimer",
        "RoleBinding/society-run-worker",
        "RoleBinding/society-run-worker",
        "ServiceAccount/society-run-worker",
        "ValidatingAdmissionPolicy/society-run-namespaces",
        "ValidatingAdmissionPolicy/society-run-signing-key",
        "ValidatingAdmissionPolicy/society-run-worker",
        "ValidatingAdmissionPolicyBinding/society-run-namespaces",
        "ValidatingAdmissionPolicyBinding/society-run-signing-key",
        "ValidatingAdmissionPolicyBinding/society-run-worker",
    ]
    found = [image for obj in objects for image in images(obj)]
    assert found, "the chart runs no image"
    assert [image for image in found if not DIGEST_PINNED.match(image)] == []


def rbac_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects that grant or confine rights, in a stable order."""
    kinds = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmission")
    chosen = [o for o in objects if o["kind"].startswith(kinds)]
    return sorted(chosen, key=lambda o: (o["kind"], o["metadata"]["name"]))


def test_the_chart_grants_exactly_what_the_code_grants() -> None:
    objects = render("release-ns", credentialsNamespace="creds-ns")
    coded = [
        *worker_objects("release-ns", "creds-ns"),
        credentials_reader_role("creds-ns"),
        warm_claimer_role(WARM_NAMESPACE),
    ]
    assert rbac_objects(objects) == rbac_objects(coded)
    by_kind = {o["kind"]: o for o in objects}
    worker = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    deployment = worker_deployment(image="unused", temporal_address="unused")["spec"]["template"][
        "spec"]["containers"][0]  # fmt: skip
    assert worker["command"][:5] == deployment["command"]
    assert {e["name"] for e in deployment["env"]} <= {e["name"] for e in worker["env"]}


def test_the_worker_holds_no_cluster_wide_right_to_run_read_secrets_exec_or_delete() -> None:
    """Cluster-wide the worker creates namespaces and RoleBindings (the admission policy says
    where) and binds two named ClusterRoles; everything else it does is bound per run namespace."""
    objects = render()
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"}
    assert bound == {"society-run-worker"}
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    rules = by_name["ClusterRole", "society-run-worker"]["rules"]
    granted = {
        (resource, verb, tuple(rule.get("resourceNames", ())))
        for rule in rules
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("namespaces", "get", ()),
        ("namespaces", "list", ()),
        ("namespaces", "watch", ()),
        ("namespaces", "create", ()),
        ("rolebindings", "create", ()),
        ("clusterroles", "get", ("society-run-namespace", "society-run-controller")),
        ("clusterroles", "bind", ("society-run-namespace", "society-run-controller")),
    }
    policy = by_name["ValidatingAdmissionPolicy", "society-run-worker"]
    assert "system:serviceaccount:society-system:society-run-worker" in str(policy["spec"])
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    assert [p["spec"]["failurePolicy"] for p in policies] == ["Fail", "Fail", "Fail"]


def test_the_chart_and_the_kind_config_record_the_pinned_versions() -> None:
    versions = read_versions()
    annotations = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]
    assert annotations["society.run/kueue-version"] == versions["KUEUE_VERSION"]
    assert annotations["society.run/agent-sandbox-version"] == versions["AGENT_SANDBOX_VERSION"]
    assert annotations["society.run/kubernetes-version"] == versions["KUBERNETES_VERSION"]
    cluster = yaml.safe_load((REPO / "kind" / "cluster.yaml").read_text())
    nodes = [node["image"] for node in cluster["nodes"]]
    assert nodes and all(DIGEST_PINNED.match(image) for image in nodes)
    minor = ".".join(versions["KUBERNETES_VERSION"].split(".")[:2])
    assert all(image.split(":")[1].startswith(minor + ".") for image in nodes)
    readme = (REPO / "kind" / "README.md").read_text()
    assert "KUEUE_VERSION" in readme and "AGENT_SANDBOX_VERSION" in readme


def test_the_charts_warm_pool_is_the_one_a_run_of_its_shape_claims_on_the_agents_nodes() -> None:
    """`push-images --warm-pool` writes the pool as the platform makes it; the chart places its
    pods on the agents' pool, and its name is the one a scripted roster looks for."""
    from controller.agents import scripted
    from controller.ops.cluster.images import SCRIPTED_IMAGE, WORKER_IMAGE, chart_image_values
    from controller.platforms.kubernetes import warm

    worker = "r.example/society/worker@sha256:" + "a" * 64
    agent_image = "r.example/society/python@sha256:" + "b" * 64
    pushed = {WORKER_IMAGE: worker, SCRIPTED_IMAGE: agent_image}
    values = chart_image_values(pushed, warm_pool=3)
    selector = {"cloud.google.com/gke-nodepool": "agents"}
    taint = [{"key": "society.run/agents", "operator": "Exists", "effect": "NoSchedule"}]
    objects = render(**values, agents={"nodeSelector": selector, "tolerations": taint})
    by_kind = {o["kind"]: o for o in objects if o["kind"].startswith("Sandbox")}
    expected = warm.pool_name(scripted(image=agent_image))
    assert by_kind["SandboxWarmPool"]["metadata"]["name"] == expected
    assert by_kind["SandboxWarmPool"]["spec"] == {
        "replicas": 3,
        "sandboxTemplateRef": {"name": expected},
    }
    pod = by_kind["SandboxTemplate"]["spec"]["podTemplate"]["spec"]
    assert pod["nodeSelector"] == selector and pod["tolerations"] == taint
    assert pod["containers"][0]["image"] == agent_image
    assert all(o["metadata"]["namespace"] == warm.WARM_NAMESPACE for o in by_kind.values())
    assert not [o for o in render() if o["kind"].startswith("Sandbox")]  # none by default
