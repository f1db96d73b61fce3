"""The Helm chart and the kind config, without helm: the chart's templates use only plain value
substitutions, so substituting ``values.yaml`` renders them; the result must parse, pin every
image by digest, and grant exactly the rules the code grants (so chart and code cannot drift).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from controlplane import read_versions

from controller.platform.kubernetes.access import (
    WORKER_RULES,
    credentials_reader_role,
    worker_deployment,
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "society-runner"
DIGEST_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
PLACEHOLDER = re.compile(r"{{-?\s*([^}]*?)\s*-?}}")


def render(namespace: str = "society-system") -> list[dict[str, Any]]:
    """The chart's objects with the default values (the subset of Helm the chart uses)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    scope = {".Values": values, ".Release": {"Namespace": namespace}, ".Chart": {
        "AppVersion": chart["appVersion"], "Version": chart["version"]}}  # fmt: skip

    def lookup(match: re.Match[str]) -> str:
        expression = match.group(1)
        root, _, path = expression.partition(".")[2].partition(".")
        assert expression.startswith((".Values.", ".Release.", ".Chart.")), expression
        value: Any = scope["." + root]
        for part in path.split("."):
            value = value[part]
        return str(value)

    objects = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        text = PLACEHOLDER.sub(lookup, template.read_text())
        objects += [obj for obj in yaml.safe_load_all(text) if obj]
    return objects


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
        "ClusterRole/society-run-worker",
        "ClusterRoleBinding/society-run-worker",
        "Deployment/society-run-worker",
        "Namespace/society-credentials",
        "ResourceFlavor/society-agents",
        "Role/society-credentials-reader",
        "ServiceAccount/society-run-worker",
    ]
    found = [image for obj in objects for image in images(obj)]
    assert found, "the chart runs no image"
    assert [image for image in found if not DIGEST_PINNED.match(image)] == []


def test_the_chart_grants_exactly_what_the_code_grants() -> None:
    by_kind = {o["kind"]: o for o in render()}
    assert by_kind["ClusterRole"]["rules"] == WORKER_RULES
    reader = credentials_reader_role("society-credentials")
    assert by_kind["Role"]["rules"] == reader["rules"]
    assert by_kind["Role"]["metadata"]["name"] == reader["metadata"]["name"]
    worker = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    coded = worker_deployment(image="unused", temporal_address="unused")["spec"]["template"][
        "spec"]["containers"][0]  # fmt: skip
    assert worker["command"][:5] == coded["command"]
    assert {e["name"] for e in coded["env"]} <= {e["name"] for e in worker["env"]}


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
