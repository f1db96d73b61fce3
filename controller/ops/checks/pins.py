"""Checked-in pins: every image reference carries a well-formed digest, and the versions recorded
in ``kind/versions.env``, the chart, the kind config, Terraform and the CI workflow agree.

A digest's existence in a registry cannot be checked offline: these check its presence and form.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from controller.ops.checks.tools import hcl_parser, read_versions
from controller.ops.repository import ROOT as REPO

DIGEST_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(:[\w][\w.-]{0,127})?@sha256:[0-9a-f]{64}$")
CHART = REPO / "helm" / "society-runner"
KIND_CONFIG = REPO / "kind" / "cluster.yaml"
KIND_VERSIONS = REPO / "kind" / "versions.env"
WORKFLOW = REPO / "terraform" / "ci" / "validate.yml"


def image_references(obj: Any) -> Iterator[str]:
    """Every ``image:`` string in a parsed manifest."""
    if isinstance(obj, dict):
        if isinstance(obj.get("image"), str):
            yield obj["image"]
        for value in obj.values():
            yield from image_references(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from image_references(value)


def dockerfile_bases(path: Path) -> list[str]:
    """The default base image of every ``FROM`` in a Dockerfile (``ARG`` defaults substituted;
    a ``FROM`` naming an earlier stage is not an image)."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    bases = []
    for line in path.read_text().splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("ARG", "FROM"):
            continue
        if words[0].upper() == "ARG" and len(words) > 1 and "=" in words[1]:
            name, _, default = words[1].partition("=")
            args[name] = default.strip('"')
            continue
        image = next((w for w in words[1:] if not w.startswith("--")), "")
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
        if len(words) >= 4 and words[-2].upper() == "AS":
            stages.add(words[-1])
        if image not in stages and image != "scratch":
            bases.append(image)
    return bases


def digest_problems(rendered: list[dict[str, Any]]) -> list[str]:
    """Image references without a well-formed digest, in the rendered chart, the kind config and
    the Dockerfiles' defaults."""
    found = [(f"chart: {o.get('kind')}/{o.get('metadata', {}).get('name')}", image)
             for o in rendered for image in image_references(o)]  # fmt: skip
    kind = yaml.safe_load(KIND_CONFIG.read_text())
    found += [("kind/cluster.yaml", image) for image in image_references(kind)]
    for dockerfile in sorted(REPO.glob("**/Dockerfile")):
        if ".venv" in dockerfile.parts or "node_modules" in dockerfile.parts:
            continue
        where = str(dockerfile.relative_to(REPO))
        found += [(where, image) for image in dockerfile_bases(dockerfile)]
    problems = [
        f"{where}: {image!r} is not pinned by a well-formed digest (NAME@sha256:<64 hex>)"
        for where, image in found
        if not DIGEST_REFERENCE.match(image)
    ]
    if not found:
        problems.append("no image reference found at all: the search is broken")
    return problems


def version_problems(tool_versions: dict[str, str]) -> list[str]:
    """Where the chart, the kind config, Terraform or the CI workflow disagree with the pins."""
    pins = read_versions(KIND_VERSIONS)
    problems = []
    annotations = yaml.safe_load((CHART / "Chart.yaml").read_text()).get("annotations", {})
    for annotation, pin in (
        ("society.run/kubernetes-version", "KUBERNETES_VERSION"),
        ("society.run/kueue-version", "KUEUE_VERSION"),
        ("society.run/agent-sandbox-version", "AGENT_SANDBOX_VERSION"),
    ):
        if annotations.get(annotation) != pins.get(pin):
            problems.append(
                f"helm Chart.yaml {annotation} = {annotations.get(annotation)!r} but "
                f"kind/versions.env {pin} = {pins.get(pin)!r}"
            )
    minor = ".".join(pins["KUBERNETES_VERSION"].lstrip("v").split(".")[:2])
    kind = yaml.safe_load(KIND_CONFIG.read_text())
    for image in image_references(kind):
        tag = image.split("@")[0].rpartition(":")[2].lstrip("v")
        if not tag.startswith(minor + "."):
            problems.append(f"kind/cluster.yaml node image {image} is not Kubernetes {minor}")
    variables = _terraform_defaults()
    if variables.get("kubernetes_version") != minor:
        problems.append(
            f"terraform variable kubernetes_version defaults to "
            f"{variables.get('kubernetes_version')!r}, not {minor} (kind/versions.env)"
        )
    if WORKFLOW.exists():
        workflow = WORKFLOW.read_text()
        opentofu = tool_versions["OPENTOFU_VERSION"].lstrip("v")
        if f"tofu_version: {opentofu}" not in workflow and f"tofu_version: '{opentofu}'" not in (
            workflow
        ):
            problems.append(f"{WORKFLOW.relative_to(REPO)} does not pin OpenTofu {opentofu}")
    else:
        problems.append(f"{WORKFLOW.relative_to(REPO)} is missing")
    return problems


def _terraform_defaults() -> dict[str, Any]:
    hcl2 = hcl_parser()

    defaults: dict[str, Any] = {}
    with (REPO / "terraform" / "variables.tf").open() as handle:
        for block in hcl2.load(handle).get("variable", []):
            for name, body in block.items():
                default = body.get("default")
                if isinstance(default, str) and default[:1] == default[-1:] == '"':
                    default = default[1:-1]
                defaults[name.strip('"')] = default
    return defaults
