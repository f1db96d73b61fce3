"""The NanoClaw runtime in a real pod on kind, from the image scripts/build-images.sh
built here (``society/nanoclaw:dev``, pinned through the image map at submit time): through the
readiness gate, its reply committed from its own router session, its calls measured by the run's
model gateway as Anthropic Messages."""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from k8s_run_support import verified
from kind_plane import KindPlane

from controller import Run, RunSpec
from controller.agents.nanoclaw import NanoClawAgentConfigured, NanoClawOwner, nanoclaw
from controller.events.network import RouterMessageCommitted
from controller.events.run import ReadinessGatePassed
from controller.modelgateway.events import AgentModelUsage
from controller.platforms.kubernetes import Kube
from controller.run import ProgramFinished, RunContext, Success
from controller.run.runid import new_run_id
from society_sandbox.runtimes.nanoclaw import SDK_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def require_local_model() -> None:
    """The pod's model is the run's local model, served from this process."""
    if importlib.util.find_spec("xllamacpp") is not None:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the NanoClaw pod test)")
    pytest.skip(message)


async def _image_of(kubeconfig: str, run_id: str, agent: str) -> str:
    async with Kube.connect(kubeconfig=kubeconfig) as admin:
        sandbox = await admin.get("Sandbox", agent, run_id)
        assert sandbox is not None
        image: str = sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"]
        return image


async def test_a_nanoclaw_agent_in_a_real_pod_passes_the_gate_and_its_reply_is_committed(
    control_plane: KindPlane,
    cluster_queue: str,
    tmp_path: Path,
    require_local_model: None,
) -> None:
    assert control_plane.images is not None
    run_id = new_run_id()
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> dict[str, str]:
        alice = ctx.agents.alice
        assert isinstance(alice.owner, NanoClawOwner)
        seen["image"] = await _image_of(str(control_plane.kubeconfig), run_id, "alice")
        seen["hello"] = await alice.owner.hello()
        async with ctx.network.endpoint("host") as host:
            chat = await host.open(alice.agent)
            await chat.send("Hello Alice. What price do you ask for your bike?")
            with anyio.fail_after(300):
                async for message in host.messages():
                    return {"reply": message.text, "from": message.sender.name}
        raise AssertionError("unreachable")

    spec = RunSpec.define(
        id="acme.k8s-nanoclaw/v1",
        agents={"alice": nanoclaw("You are Alice. You sell a bike. Answer in one sentence.")},
        execute=execute,
    )
    async with on_cluster(
        control_plane, run_id, cluster_queue=cluster_queue, startup_timeout_s=300.0
    ) as (platform, kube, _record):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path), seed=3
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert seen["image"] == control_plane.images.ref("nanoclaw")
    assert seen["hello"]["sdkVersion"] == SDK_VERSION
    ledger = verified(spec, outcome)
    [gate] = ledger.events(ReadinessGatePassed)
    assert gate.agents == ["alice"]
    [configured] = ledger.events(NanoClawAgentConfigured)
    assert configured.sdk_version == SDK_VERSION
    reply = outcome.exit.value
    assert reply["from"] == "alice" and reply["reply"].strip()
    committed = [m for m in ledger.events(RouterMessageCommitted) if m.sender_id == "agent:alice"]
    assert [m.parts[0] for m in committed] == [reply["reply"]]
    assert [u for u in ledger.events(AgentModelUsage) if u.agent == "alice"]
    assert left == []
