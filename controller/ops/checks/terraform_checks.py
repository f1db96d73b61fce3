"""Assertions on ``terraform/``'s structure, read with an HCL parser: what a reviewer would check
by eye and what ``tofu validate`` (which needs the Google provider from a registry) cannot.

The parser returns expressions as text (``"${local.x.y}"``); ``Terraform.resolve`` follows
``local.`` references to their literal values and leaves everything else as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import OpsError
from controller.ops.checks.tools import hcl_parser
from controller.ops.repository import ROOT as REPO

TERRAFORM_DIR = REPO / "terraform"
EXACT_VERSION = re.compile(r"^=?\s*\d+\.\d+\.\d+$")
_LOCAL_REF = re.compile(r"^\$\{\(?local\.([A-Za-z0-9_.]+)\)?\}$")
_VAR_REF = re.compile(r"^\$\{var\.([A-Za-z0-9_]+)\}$")
# A Google Cloud region ("europe-west4", "us-central1"); a zone adds "-a", "-b", ...
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
KUBERNETES_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    "NO_EXECUTE": "NoExecute",
}


class TerraformUnreadable(OpsError):
    """A ``.tf`` file does not parse; ``reason`` is ``terraform-unreadable``."""

    reason = "terraform-unreadable"


@dataclass(frozen=True, slots=True)
class Terraform:
    """The root module's blocks, merged over its ``.tf`` files."""

    locals: dict[str, Any]
    resources: dict[tuple[str, str], dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    terraform: list[dict[str, Any]]
    variables: dict[str, dict[str, Any]]

    @classmethod
    def load(cls, directory: Path = TERRAFORM_DIR) -> Terraform:
        hcl2 = hcl_parser()

        local_values: dict[str, Any] = {}
        resources: dict[tuple[str, str], dict[str, Any]] = {}
        outputs: dict[str, dict[str, Any]] = {}
        settings: list[dict[str, Any]] = []
        variables: dict[str, dict[str, Any]] = {}
        for path in sorted(directory.glob("*.tf")):
            try:
                with path.open() as handle:
                    parsed = hcl2.load(handle)
            except Exception as exc:  # the parser raises lark's many error types
                raise TerraformUnreadable(
                    f"{path} does not parse as HCL: {exc}; fix it (`tofu fmt` shows where)"
                ) from exc
            for block in parsed.get("locals", []):
                local_values.update(_clean(block))
            for block in parsed.get("resource", []):
                for kind, named in block.items():
                    for name, body in named.items():
                        resources[(_unquote(kind), _unquote(name))] = _clean(body)
            for block in parsed.get("output", []):
                for name, body in block.items():
                    outputs[_unquote(name)] = _clean(body)
            for block in parsed.get("variable", []):
                for name, body in block.items():
                    variables[_unquote(name)] = _clean(body)
            settings += [_clean(block) for block in parsed.get("terraform", [])]
        return cls(local_values, resources, outputs, settings, variables)

    def resolve(self, value: Any) -> Any:
        """``value`` with ``${local.a.b}`` references replaced by the locals' literal values."""
        if isinstance(value, dict):
            return {str(self.resolve(key)): self.resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if isinstance(value, str):
            match = _LOCAL_REF.match(value)
            if match:
                found: Any = self.locals
                for part in match.group(1).split("."):
                    found = found[part]
                return self.resolve(found)
        return value

    def resource(self, kind: str, name: str) -> dict[str, Any]:
        return self.resources[(kind, name)]

    def of_kind(self, kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for (found, name), body in self.resources.items():
            if found == kind:
                yield name, body


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _clean(node: Any) -> Any:
    """The parser's output without its bookkeeping keys, with string literals unquoted."""
    if isinstance(node, dict):
        return {
            _unquote(key): _clean(value)
            for key, value in node.items()
            if key not in ("__is_block__", "__comments__", "__inline_comments__")
        }
    if isinstance(node, list):
        return [_clean(value) for value in node]
    if isinstance(node, str):
        return _unquote(node)
    return node


def _one(blocks: Any) -> dict[str, Any]:
    """A nested block the parser gives as a one-element list."""
    if isinstance(blocks, list) and len(blocks) == 1 and isinstance(blocks[0], dict):
        return blocks[0]
    return {}


def structure_problems(tf: Terraform) -> list[str]:
    """What is wrong with the module's structure; empty when every assertion holds."""
    problems: list[str] = []
    problems += _agents_pool(tf)
    problems += _cluster(tf)
    problems += _bucket(tf)
    problems += _providers(tf)
    return problems


def agents_tolerations(tf: Terraform) -> list[dict[str, Any]]:
    """The tolerations Terraform hands the chart (``local.agents_tolerations``)."""
    tolerations: list[dict[str, Any]] = tf.resolve(tf.locals.get("agents_tolerations", []))
    return tolerations


def _agents_pool(tf: Terraform) -> list[str]:
    try:
        pool = tf.resource("google_container_node_pool", "agents")
    except KeyError:
        return ["no google_container_node_pool.agents"]
    problems = []
    config = _one(pool.get("node_config"))
    taints = [tf.resolve(t) for t in config.get("taint", [])]
    labels = tf.resolve(config.get("labels", {}))
    if not taints:
        problems.append("the agents pool has no taint: other pods would land on agents' nodes")
    expected = [
        {
            "key": t.get("key"),
            "operator": "Equal",
            "value": t.get("value"),
            "effect": KUBERNETES_EFFECTS.get(str(t.get("effect")), t.get("effect")),
        }
        for t in taints
    ]
    given = agents_tolerations(tf)
    if expected != given:
        problems.append(
            f"the agents pool's taints {taints} are not what the chart's agents tolerate "
            f"(local.agents_tolerations = {given}); make them agree"
        )
    if "local.agents_tolerations" not in str(tf.outputs.get("helm_values", {}).get("value")):
        problems.append("output helm_values does not hand local.agents_tolerations to the chart")
    if not any(labels.get(t.get("key")) == t.get("value") for t in taints):
        problems.append(f"the agents pool's labels {labels} do not carry its taint's key=value")
    if not _one(pool.get("autoscaling")).get("max_node_count"):
        problems.append("the agents pool does not autoscale (no autoscaling.max_node_count)")
    else:
        problems += _agents_quota(tf, pool)
    return problems


def _expression(value: Any) -> str:
    """``value`` as expression text: ``${var.x}`` gives ``var.x``, a literal ``5`` gives ``5``."""
    text = str(value)
    return text[2:-1] if text.startswith("${") and text.endswith("}") else text


def _agents_quota(tf: Terraform, pool: dict[str, Any]) -> list[str]:
    """The chain from the pool's autoscaling maximum to the chart's ``agentQueue``: Kueue must
    admit what the autoscaler can grow into, no more (pods pending on nodes that never come)."""
    problems = []
    maximum = _expression(_one(pool.get("autoscaling"))["max_node_count"])
    zones = _expression(pool.get("node_locations"))
    expected = f"${{{maximum} * length({zones})}}"
    if tf.locals.get("agents_max_nodes") != expected:
        problems.append(
            f"local.agents_max_nodes = {tf.locals.get('agents_max_nodes')!r} is not the agents "
            f"pool's autoscaling maximum per zone times its zones ({expected!r}), so the queue "
            "quota does not match the pool; compute it from the pool's own expressions"
        )
    for name in ("agents_quota_cpu", "agents_quota_memory"):
        if "local.agents_max_nodes" not in str(tf.locals.get(name)):
            problems.append(
                f"local.{name} = {tf.locals.get(name)!r} is not computed from "
                "local.agents_max_nodes, so the queue quota does not follow the pool's maximum"
            )
    helm_values = str(tf.outputs.get("helm_values", {}).get("value"))
    queue = re.search(r"agentQueue\s*=\s*\{([^{}]*)\}", helm_values)
    body = queue.group(1) if queue else ""
    if not (
        re.search(r"\bcpu\s*=\s*(tostring\()?local\.agents_quota_cpu\b", body)
        and re.search(r"\bmemory\s*=\s*local\.agents_quota_memory\b", body)
    ):
        problems.append(
            f"output helm_values' agentQueue is {{{body.strip()}}}, not local.agents_quota_cpu and "
            "local.agents_quota_memory: the chart's queue quota would not follow the agents "
            "pool's autoscaling maximum"
        )
    return problems


def _cluster(tf: Terraform) -> list[str]:
    clusters = list(tf.of_kind("google_container_cluster"))
    if len(clusters) != 1:
        return [f"expected one google_container_cluster, found {len(clusters)}"]
    _, cluster = clusters[0]
    problems = []
    if not _one(cluster.get("workload_identity_config")).get("workload_pool"):
        problems.append("Workload Identity is off (workload_identity_config.workload_pool unset)")
    if cluster.get("datapath_provider") != "ADVANCED_DATAPATH":
        problems.append(
            "Dataplane V2 is off (datapath_provider must be ADVANCED_DATAPATH), so "
            "NetworkPolicy would not be enforced"
        )
    if _one(cluster.get("private_cluster_config")).get("enable_private_nodes") is not True:
        problems.append("nodes are not private (private_cluster_config.enable_private_nodes)")
    problems += _regional(tf, tf.resolve(cluster.get("location")))
    for name, pool in tf.of_kind("google_container_node_pool"):
        mode = _one(_one(pool.get("node_config")).get("workload_metadata_config")).get("mode")
        if mode != "GKE_METADATA":
            problems.append(f"node pool {name} does not serve Workload Identity (GKE_METADATA)")
    return problems


def _regional(tf: Terraform, location: Any) -> list[str]:
    """The cluster's location is a region, literally or as a variable's default: a zonal
    cluster has a single control-plane replica."""
    shown = repr(location)
    variable = _VAR_REF.match(str(location))
    if variable:
        name = variable.group(1)
        location = tf.variables.get(name, {}).get("default")
        shown = f"var.{name} (default {location!r})"
    if isinstance(location, str) and REGION.match(location):
        return []
    return [
        f"the cluster is not regional: its location {shown} is not a region such as "
        '"europe-west4" (a zone gives one control-plane replica); write location = var.region '
        "with a region as the variable's default"
    ]


def _bucket(tf: Terraform) -> list[str]:
    buckets = list(tf.of_kind("google_storage_bucket"))
    if not buckets:
        return ["no google_storage_bucket for ledgers"]
    problems = []
    for name, bucket in buckets:
        if bucket.get("public_access_prevention") != "enforced":
            problems.append(f"bucket {name}: public_access_prevention is not enforced")
        if bucket.get("uniform_bucket_level_access") is not True:
            problems.append(f"bucket {name}: uniform_bucket_level_access is not on")
        if _one(bucket.get("versioning")).get("enabled") is not True:
            problems.append(f"bucket {name}: versioning is not enabled")
    for name, member in tf.of_kind("google_storage_bucket_iam_member"):
        if "allUsers" in str(member) or "allAuthenticatedUsers" in str(member):
            problems.append(f"bucket IAM {name} grants the public")
    return problems


def _providers(tf: Terraform) -> list[str]:
    problems = []
    providers: dict[str, Any] = {}
    for block in tf.terraform:
        for required in block.get("required_providers", []):
            providers.update(required)
    if not providers:
        problems.append("terraform.required_providers is empty: provider versions are unpinned")
    for name, spec in providers.items():
        version = spec.get("version") if isinstance(spec, dict) else None
        if not isinstance(version, str) or not EXACT_VERSION.match(version):
            problems.append(
                f"provider {name} is not pinned to one exact version (version = {version!r}); "
                'write version = "= X.Y.Z"'
            )
    return problems
