"""What warm pools are made of, without a cluster: a pool's template carries nothing of any agent,
a claim carries only the run's labels, and a roster is placed only where its pool has room."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from controller.agents import Resources, SecretRef, scripted
from controller.platforms.kubernetes import warm

IMAGE = "registry.invalid/society/python@sha256:" + "1" * 64


def _pool(name: str, ready: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"readyReplicas": ready}}


def test_a_pools_template_carries_nothing_of_any_agent() -> None:
    descriptor = scripted(
        image=IMAGE,
        environment={"ACME_SECRET_HINT": "per-agent"},
        credentials={"api_key": SecretRef(env="ACME_KEY")},
    )
    template = warm.template(descriptor)
    text = json.dumps(template)
    assert "ACME_SECRET_HINT" not in text and "per-agent" not in text and "api_key" not in text
    pod = template["spec"]["podTemplate"]["spec"]
    agent = pod["containers"][0]
    assert agent["command"] == [*warm.WAITER, *descriptor.command]
    assert [e["name"] for e in agent["env"]] == ["SOCIETY_BRIDGE_PORT"]
    assert {v["name"] for v in pod["volumes"]} == {"work", "tmp"}  # no Secret volume
    assert template["spec"]["networkPolicyManagement"] == "Unmanaged"


def test_one_shape_one_pool_whatever_each_agents_own_variables_and_files() -> None:
    alice = scripted(image=IMAGE, environment={"ACME_MOOD": "calm"})
    bob = scripted(image=IMAGE, files={"notes.txt": b"bob's"})
    assert warm.pool_name(alice) == warm.pool_name(bob)
    bigger = dataclasses.replace(alice, resources=Resources(cpu=0.5, memory_mib=256))
    assert warm.pool_name(bigger) != warm.pool_name(alice)
    other_image = dataclasses.replace(alice, image=IMAGE.replace("1" * 64, "2" * 64))
    assert warm.pool_name(other_image) != warm.pool_name(alice)


def test_a_claim_carries_the_runs_labels_for_the_pod_and_nothing_else() -> None:
    at = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
    claim = warm.claim("sr-" + "a" * 32, "alice", "scripted-x", shutdown_at=at)
    spec = claim["spec"]
    assert set(spec) == {"warmPoolRef", "lifecycle", "additionalPodMetadata"}  # no env, volumes
    assert spec["additionalPodMetadata"]["labels"] == {
        "society.run/id": "sr-" + "a" * 32,
        "society.run/agent": "alice",
        "society.run/role": "agent",
    }
    assert all(
        k.startswith(warm.LABEL_DOMAIN + "/") for k in spec["additionalPodMetadata"]["labels"]
    )
    assert len(claim["metadata"]["name"]) <= 63


def test_a_shape_whose_pool_is_short_starts_cold_while_one_with_room_is_claimed() -> None:
    small = scripted(image=IMAGE)
    big = scripted(image=IMAGE, resources=Resources(cpu=0.5, memory_mib=256))
    roster = {"a": small, "b": small, "c": big, "d": big}
    pools = [_pool(warm.pool_name(small), 2), _pool(warm.pool_name(big), 1)]
    assert warm.placeable(roster, pools) == {"a": warm.pool_name(small), "b": warm.pool_name(small)}
    assert warm.placeable(roster, []) == {}


def test_a_claim_is_warm_when_it_adopted_a_pools_sandbox_and_cold_when_one_was_made_for_it() -> (
    None
):
    def claim(sandbox: str | None, status: str, reason: str = "") -> dict[str, Any]:
        ready = {"type": "Ready", "status": status, "reason": reason, "message": "m"}
        return {
            "metadata": {"name": "c-1"},
            "status": {"conditions": [ready], "sandbox": {"name": sandbox} if sandbox else {}},
        }

    assert warm.claim_outcome(claim("scripted-x-abcde", "True")) == warm.Claimed(
        "c-1", "scripted-x-abcde", warm=True
    )
    assert warm.claim_outcome(claim("c-1", "True")) == warm.Claimed("c-1", "c-1", warm=False)
    assert warm.claim_outcome(claim("scripted-x-abcde", "False", "SandboxNotReady")) is None
    assert warm.claim_outcome(claim(None, "False", "TemplateNotFound")) == "TemplateNotFound: m"
    assert warm.claim_outcome(None) is None
