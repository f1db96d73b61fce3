"""The run's model gateway on a cluster: advertised through the per-run Service, on a port the
NetworkPolicies open to agents only, and reached by llm agents in real pods on kind,
from the llm image built here; the node enforces the policies (kube-router)."""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from kind_plane import KindPlane

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "modelgateway"))
from fake_provider import FakeProviderServer

from controller import Run, RunSpec
from controller.agents import Completed
from controller.agents.llm import llm
from controller.modelgateway import ProviderConfig
from controller.modelgateway.events import AgentModelUsage
from controller.platforms.kubernetes import Kube, objects, routing
from controller.run import ProgramFinished, RunContext, Success
from controller.run.runid import new_run_id
from ledger import open_ledger_artifacts
from society_sandbox.runtimes.llm import GATEWAY_URL_VARIABLE, Budget

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY_NAME = "ACME_LLM_API_KEY"
LLM = "society/llm:dev"
"""The llm runtime's name in the image map."""


@pytest.fixture
def fake_provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


async def test_llm_agents_reach_the_gateway_through_the_run_service_on_a_port_policies_allow(
    control_plane: KindPlane,
    cluster_queue: str,
    fake_provider: FakeProviderServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_NAME, "sk-acme-test")
    monkeypatch.setenv("SOCIETY_CREDENTIALS", KEY_NAME)  # the operator allows the key
    monkeypatch.setenv("SOCIETY_PROVIDER_URLS", fake_provider.base_url)  # and the provider
    provider = ProviderConfig(
        name="acme", base_url=fake_provider.base_url, model="fake-model", api_key_name=KEY_NAME
    )
    run_id = new_run_id()
    kubeconfig = str(control_plane.kubeconfig)
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> None:
        async with Kube.connect(kubeconfig=kubeconfig) as admin:
            seen["service"] = await admin.get("Service", objects.ROUTER_SERVICE, run_id)
            seen["policies"], _ = await admin.list("NetworkPolicy", run_id)
            seen["sandbox"] = await admin.get("Sandbox", "alice", run_id)
        await ctx.agents.alice.owner.instruct("Greet Bob.", peers=["bob"])
        with anyio.fail_after(60):
            assert isinstance(await ctx.agents.alice.termination, Completed)
        await ctx.agents.bob.owner.stop()
        with anyio.fail_after(30):
            await ctx.agents.bob.termination

    spec = RunSpec.define(
        id="acme.k8s-llm/v1",
        agents={
            "alice": llm("A terse test agent.", provider=provider, image=LLM,
                         budget=Budget(max_turns=1)),
            "bob": llm("A terse test agent.", provider=provider, image=LLM),
        },
        execute=execute,
    )  # fmt: skip
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _record,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert left == []

    env = {e["name"]: e["value"] for e in seen["sandbox"]["spec"]["podTemplate"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    advertised = urlsplit(env[GATEWAY_URL_VARIABLE])
    assert advertised.hostname == routing.router_host(run_id)
    gateway_port = advertised.port
    service_ports = {p["port"]: p["name"] for p in seen["service"]["spec"]["ports"]}
    assert service_ports[gateway_port] == f"service-{gateway_port}"
    assert "router" in service_ports.values()
    policies = {p["metadata"]["name"]: p["spec"] for p in seen["policies"]}
    agents_to_controller = policies["agents"]["egress"][0]
    assert gateway_port in {p["port"] for p in agents_to_controller["ports"]}
    controller_from_agents = policies["controller"]["ingress"][0]
    assert gateway_port in {p["port"] for p in controller_from_agents["ports"]}

    # the agents' programs called the gateway at that address (the only way out of their pods
    # the policies leave open); it measured and recorded them
    assert fake_provider.requests, "no model call reached the provider"
    ledger = open_ledger_artifacts(spec.catalog, outcome.receipt.ledger_dir)
    assert "alice" in {e.agent for e in ledger.events(AgentModelUsage)}
