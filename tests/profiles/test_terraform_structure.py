"""The Terraform structure assertions hold on terraform/ and catch each weakening they name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from controller.ops.checks.terraform_checks import (
    TERRAFORM_DIR,
    Terraform,
    TerraformUnreadable,
    agents_tolerations,
    structure_problems,
)


def edited(tmp_path: Path, file: str, old: str, new: str) -> Terraform:
    """terraform/ copied with one textual edit, loaded."""
    copy = tmp_path / "terraform"
    shutil.copytree(TERRAFORM_DIR, copy)
    text = (copy / file).read_text()
    assert old in text, f"{old!r} not in {file}"
    (copy / file).write_text(text.replace(old, new, 1))
    return Terraform.load(copy)


def test_the_checked_in_module_passes_every_structure_assertion() -> None:
    tf = Terraform.load()
    assert structure_problems(tf) == []
    assert agents_tolerations(tf) == [
        {"key": "society.run/pool", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}
    ]


@pytest.mark.parametrize(
    ("file", "old", "new", "said"),
    [
        (
            "main.tf",
            'effect = "NO_SCHEDULE"',
            'effect = "NO_EXECUTE"',
            "not what the chart's agents tolerate",
        ),
        (
            "main.tf",
            'operator = "Equal", value = "agents"',
            'operator = "Equal", value = "agentz"',
            "not what the chart's agents tolerate",
        ),
        ("main.tf", '"ADVANCED_DATAPATH"', '"LEGACY_DATAPATH"', "Dataplane V2 is off"),
        (
            "main.tf",
            "workload_pool = local.workload_pool",
            "workload_pool = null",
            "Workload Identity is off",
        ),
        (
            "main.tf",
            'mode = "GKE_METADATA"',
            'mode = "GCE_METADATA"',
            "does not serve Workload Identity",
        ),
        (
            "main.tf",
            "enable_private_nodes    = true",
            "enable_private_nodes    = false",
            "nodes are not private",
        ),
        (
            "main.tf",
            'public_access_prevention    = "enforced"',
            'public_access_prevention    = "inherited"',
            "public_access_prevention is not enforced",
        ),
        (
            "main.tf",
            "uniform_bucket_level_access = true",
            "uniform_bucket_level_access = false",
            "uniform_bucket_level_access is not on",
        ),
        (
            "versions.tf",
            'version = "= 6.50.0"',
            'version = ">= 6.0"',
            "not pinned to one exact version",
        ),
        (
            "outputs.tf",
            "tolerations  = local.agents_tolerations",
            "tolerations  = []",
            "does not hand local.agents_tolerations",
        ),
        (
            "main.tf",
            "versioning {\n    enabled = true",
            "versioning {\n    enabled = false",
            "versioning is not enabled",
        ),
        (
            "main.tf",
            "\n  versioning {\n    enabled = true\n  }\n",
            "\n",
            "versioning is not enabled",
        ),
        (
            "main.tf",
            "location = var.region # regional",
            'location = "us-central1-a" # regional',
            "the cluster is not regional",
        ),
        (
            "main.tf",
            "location = var.region # regional",
            'location = "${var.region}-a" # regional',
            "the cluster is not regional",
        ),
        (
            "variables.tf",
            'default     = "europe-west4"',
            'default     = "europe-west4-a"',
            "the cluster is not regional",
        ),
        (
            "main.tf",
            "max_node_count = var.agents_max_nodes_per_zone",
            "max_node_count = 5",
            "is not the agents pool's autoscaling maximum",
        ),
        (
            "main.tf",
            "agents_max_nodes    = var.agents_max_nodes_per_zone * length(var.zones)",
            "agents_max_nodes    = var.agents_max_nodes_per_zone",
            "is not the agents pool's autoscaling maximum",
        ),
        (
            "main.tf",
            'agents_quota_memory = "${floor(local.agents_max_nodes',
            'agents_quota_memory = "156Gi" # "${floor(local.agents_max_nodes',
            "local.agents_quota_memory = '156Gi' is not computed from local.agents_max_nodes",
        ),
        (
            "outputs.tf",
            "cpu    = tostring(local.agents_quota_cpu)",
            'cpu    = "45"',
            "the chart's queue quota would not follow",
        ),
    ],
)
def test_each_weakening_of_the_module_is_named(
    tmp_path: Path, file: str, old: str, new: str, said: str
) -> None:
    problems = structure_problems(edited(tmp_path, file, old, new))
    assert any(said in problem for problem in problems), problems


def test_a_literal_region_as_the_clusters_location_is_regional(tmp_path: Path) -> None:
    tf = edited(tmp_path, "main.tf", "location = var.region", 'location = "us-central1"')
    assert structure_problems(tf) == []


def test_a_file_that_does_not_parse_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TerraformUnreadable, match=r"main\.tf does not parse"):
        edited(tmp_path, "main.tf", "locals {", "locals {{")
