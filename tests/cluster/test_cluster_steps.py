"""The install step runner: a line per step with its outcome and time; the first failure stops
the sequence and names its step."""

from __future__ import annotations

import io
import itertools

import anyio
import pytest

from controller.ops.cluster.queue_size import parse_selector, pool_quota, quantity
from controller.ops.cluster.steps import Step, StepFailed, StepRunner


def _runner(out: io.StringIO) -> StepRunner:
    ticks = itertools.count(0, 1.5)
    return StepRunner(out, clock=lambda: next(ticks))


def test_each_step_prints_its_start_then_its_outcome_and_time() -> None:
    out = io.StringIO()

    async def created() -> str:
        return "created"

    async def reused() -> str:
        return "reused"

    records = anyio.run(_runner(out).run, [Step("cluster", created), Step("registry", reused)])
    assert [(r.name, r.outcome) for r in records] == [
        ("cluster", "created"),
        ("registry", "reused"),
    ]
    assert out.getvalue().splitlines() == [
        "[1/2] cluster  ...",
        "[1/2] cluster  created (1.5 s)",
        "[2/2] registry ...",
        "[2/2] registry reused (1.5 s)",
    ]


def test_a_failed_step_stops_the_sequence_and_is_named() -> None:
    out, ran = io.StringIO(), []

    async def fails() -> str:
        raise StepFailed("Deployment x was not ready after 300 s", reason="not-ready")

    async def later() -> str:
        ran.append("later")
        return "done"

    with pytest.raises(StepFailed) as raised:
        anyio.run(_runner(out).run, [Step("temporal", fails), Step("chart", later)])
    assert raised.value.reason == "not-ready"
    assert str(raised.value) == "step 'temporal': Deployment x was not ready after 300 s"
    assert ran == [] and "[1/2] temporal FAILED (1.5 s)" in out.getvalue()


def test_the_queue_is_the_sum_of_the_agents_pools_allocatable() -> None:
    def node(labels: dict[str, str], cpu: str, memory: str) -> dict[str, object]:
        return {"metadata": {"labels": labels},
                "status": {"allocatable": {"cpu": cpu, "memory": memory}}}  # fmt: skip

    nodes = [
        node({"society.run/pool": "agents"}, "4", "16Gi"),
        node({"society.run/pool": "agents"}, "1900m", "8140932Ki"),
        node({"society.run/pool": "system"}, "8", "32Gi"),
    ]
    assert pool_quota(nodes, {"society.run/pool": "agents"}) == ("5900m", "24918148Ki", 2)
    assert pool_quota(nodes, {"society.run/pool": "none"}) == ("0m", "0Ki", 0)
    assert quantity("250m") * 4 == 1 and quantity("1Mi") == 1024 * 1024


def test_a_selector_is_key_value_pairs() -> None:
    assert parse_selector("a=b, c=d") == {"a": "b", "c": "d"}
    with pytest.raises(ValueError, match="'oops' is not key=value"):
        parse_selector("a=b,oops")


def test_the_kind_config_maps_the_temporal_node_ports_and_reads_the_registry_hosts_dir() -> None:
    import yaml

    from controller.ops.cluster import kind, temporal

    config = yaml.safe_load(kind.CLUSTER_CONFIG.read_text())
    control_plane = next(n for n in config["nodes"] if n["role"] == "control-plane")
    mapped = {
        (m["containerPort"], f"{m['listenAddress']}:{m['hostPort']}")
        for m in control_plane["extraPortMappings"]
    }
    ui_host = temporal.KIND_HOST_UI.removeprefix("http://")
    assert mapped == {
        (temporal.GRPC_NODE_PORT, temporal.KIND_HOST_GRPC),
        (temporal.UI_NODE_PORT, ui_host),
    }
    patches = "\n".join(config["containerdConfigPatches"])
    assert f'config_path = "{kind.CONTAINERD_CERTS_DIR}"' in patches
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    assert workers and all(n["labels"] == {"society.run/pool": "agents"} for n in workers)


def test_a_node_image_that_cannot_be_pulled_is_named_with_the_script_that_builds_it() -> None:
    from controller.ops.cluster.kind import node_image_hint
    from controller.ops.cluster.steps import StepFailed

    said = (
        "kind create cluster failed: ERROR: failed to create cluster: failed to pull image "
        '"localhost/society/kind-node:v1.36.0": Error: pinging container registry localhost: Get '
        '"https://localhost/v2/": dial tcp 127.0.0.1:443: connect: connection refused'
    )
    hinted = node_image_hint(
        StepFailed(said, reason="kind-create-failed"), "localhost/society/kind-node:v1.36.0"
    )
    assert hinted.reason == "node-image-missing"
    assert "is not on this machine and could not be pulled" in str(hinted)
    assert "scripts/build-kind-node-image.sh" in str(hinted) and "--node-image" in str(hinted)
    other = StepFailed("kind create cluster failed: no space left", reason="kind-create-failed")
    assert node_image_hint(other, "localhost/society/kind-node:v1.36.0") is other
