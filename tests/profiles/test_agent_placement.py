"""Agents' placement settings (the GKE chart sets them from Terraform's pool label and taint)."""

from __future__ import annotations

import pytest

from controller.platforms.kubernetes.settings import KubernetesSettings


def test_no_placement_by_default() -> None:
    assert KubernetesSettings.from_environment({}).agent_placement == {}


def test_the_pools_selector_and_tolerations_become_pod_spec_fields() -> None:
    settings = KubernetesSettings.from_environment(
        {
            "SOCIETY_AGENT_NODE_SELECTOR": "society.run/pool=agents",
            "SOCIETY_AGENT_TOLERATIONS": '[{"key": "society.run/pool", "operator": "Equal", '
            '"value": "agents", "effect": "NoSchedule"}]',
        }
    )
    assert settings.agent_placement == {
        "nodeSelector": {"society.run/pool": "agents"},
        "tolerations": [
            {
                "key": "society.run/pool",
                "operator": "Equal",
                "value": "agents",
                "effect": "NoSchedule",
            }
        ],
    }


@pytest.mark.parametrize("text", ['{"key": "x"}', "key=x", '["x"]'])
def test_tolerations_that_are_not_a_json_list_of_objects_name_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match="SOCIETY_AGENT_TOLERATIONS must be a JSON list"):
        KubernetesSettings.from_environment({"SOCIETY_AGENT_TOLERATIONS": text})
