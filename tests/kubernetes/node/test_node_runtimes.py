"""The peer and OpenClaw runtimes in real pods on kind, from the images that
scripts/build-images.sh built here. Their rosters name the default images (``society/peer:dev``,
``society/openclaw:dev``); the platform pins them through the image map at submit time."""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    SCRIPTED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from k8s_run_support import echo, verified
from kind_plane import KindPlane

from controller import Run, RunSpec
from controller.agents import OwnerError, PeerObservations, peer, scripted
from controller.agents.openclaw import OpenClawAgentConfigured, openclaw
from controller.agents.peer import PeerStopped
from controller.events.network import RouterMessageCommitted
from controller.events.run import AgentRuntimeReady, ReadinessGatePassed
from controller.modelgateway.events import AgentModelUsage
from controller.platforms.kubernetes import Kube
from controller.run import ProgramFinished, RunContext, Success
from controller.run.runid import new_run_id
from society_sandbox.runtimes.openclaw import OPENCLAW_VERSION
from society_sandbox.runtimes.openclaw_rpc import OpenClawRPC

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EAVESDROPPER = """
from society_sandbox.runtimes.peer import Decision, Received, Say


def respond(received: Received) -> Decision:
    latest = received.latest
    if latest is None:
        return Decision(say=(Say("say hi", to=("bob",)),), publish={"mood": "curious"})
    return Decision(
        say=(Say(f"{received.me} heard {latest.sender}: {latest.text}"),),
        publish={"mood": "listening", "heard": len(received.messages)},
    )
"""
COMMANDS: list[tuple[str, dict[str, Any]]] = [
    ("instruct", {"text": "say PWNED", "peers": ["workload"]}),
    ("stop", {"reason": "owner"}),
    ("send", {"conversation": "c-1", "text": "PWNED"}),
    ("open", {"peers": ["workload"]}),
]
"""What a program holding the bridge token could try, to make the peer send or stop."""


async def _images_of(kubeconfig: str, run_id: str, *agents: str) -> dict[str, str]:
    async with Kube.connect(kubeconfig=kubeconfig) as admin:
        found = {}
        for agent in agents:
            sandbox = await admin.get("Sandbox", agent, run_id)
            assert sandbox is not None
            found[agent] = sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"]
        return found


async def test_a_peer_in_a_real_pod_speaks_by_its_policy_and_its_bridge_cannot_make_it_send(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    assert control_plane.images is not None
    run_id = new_run_id()
    kubeconfig = str(control_plane.kubeconfig)

    async def execute(ctx: RunContext) -> dict[str, Any]:
        eve = ctx.agents.owner("eve", PeerObservations)
        images = await _images_of(kubeconfig, run_id, "eve", "bob")
        refusals: dict[str, str] = {}
        async with ctx.network.endpoint("workload") as workload:
            for op, fields in COMMANDS:  # over the pod network, with the bridge token
                try:
                    refusals[op] = repr(await eve._call(op, **fields))
                except OwnerError as exc:
                    refusals[op] = str(exc)
            chat = await workload.open(ctx.agents.eve.agent)
            await chat.send("hello eve")
            heard = []
            with anyio.fail_after(60):
                async for message in workload.messages():
                    heard.append(message.text)
                    break
            with anyio.fail_after(60):
                # polling is all a program can do: the peer publishes, it is never asked
                while (seen := await eve.observe()).sent < 3:  # noqa: ASYNC110
                    await anyio.sleep(0.2)
        return {
            "images": images,
            "refusals": refusals,
            "heard": heard,
            "seen": seen.model_dump(),
            "public": sorted(n for n in dir(PeerObservations) if not n.startswith("_")),
        }

    spec = RunSpec.define(
        id="acme.k8s-peer/v1",
        agents={
            "eve": peer("eavesdropper.py", "respond", files={"eavesdropper.py": EAVESDROPPER}),
            "bob": scripted(echo, image=SCRIPTED),
        },
        execute=execute,
    )
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
    value = outcome.exit.value
    assert value["images"]["eve"] == control_plane.images.ref("peer")  # pinned through the map
    assert value["images"]["eve"].split("@", 1)[1].startswith("sha256:")
    assert value["public"] == ["observe", "state"]
    refusals = value["refusals"]
    assert refusals["instruct"] == "this agent's bridge is read-only: 'instruct' is not offered"
    assert refusals["stop"] == "this agent's bridge is read-only: 'stop' is not offered"
    assert refusals["send"] == "unknown op 'send'" and refusals["open"] == "unknown op 'open'"
    # the first thing the workload heard was the peer's answer to its message, not a command's
    assert value["heard"] == ["eve heard workload: hello eve"]
    seen = value["seen"]
    assert seen["sent"] == 3 and seen["policy_errors"] == 0
    assert seen["published"] == {"mood": "listening", "heard": 2}

    ledger = verified(spec, outcome)
    [gate] = ledger.events(ReadinessGatePassed)
    assert sorted(gate.agents) == ["bob", "eve"]
    ready = {e.agent: e.runtime for e in ledger.events(AgentRuntimeReady)}
    assert ready == {"eve": "peer", "bob": "scripted"}
    by_eve = [e.parts for e in ledger.events(RouterMessageCommitted) if e.sender_id == "agent:eve"]
    assert ["say hi"] in by_eve and ["eve heard workload: hello eve"] in by_eve
    assert ["eve heard bob: bob heard: say hi"] in by_eve
    assert not any("PWNED" in part for parts in by_eve for part in parts)
    [stopped] = ledger.events(PeerStopped)
    assert stopped.agent == "eve" and stopped.sent == 3
    assert left == []


@pytest.fixture
def require_openclaw_image_run(control_plane: KindPlane) -> None:
    """The OpenClaw pod's model is the run's local model, served from this process."""
    if importlib.util.find_spec("xllamacpp") is not None:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the OpenClaw pod test)")
    pytest.skip(message)


async def test_an_openclaw_agent_in_a_real_pod_passes_the_gate_and_its_reply_is_committed(
    control_plane: KindPlane,
    cluster_queue: str,
    tmp_path: Path,
    require_openclaw_image_run: None,
) -> None:
    """OpenClaw's gateway starts in the pod (read-only root, non-root, 1 CPU), the controller
    speaks its own RPC over the pod network, and its turn goes through the run's model gateway."""
    assert control_plane.images is not None
    run_id = new_run_id()
    kubeconfig = str(control_plane.kubeconfig)
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> dict[str, str]:
        alice = ctx.agents.alice
        assert isinstance(alice.owner, OpenClawRPC)
        seen["images"] = await _images_of(kubeconfig, run_id, "alice")
        seen["methods"] = alice.owner.methods
        async with ctx.network.endpoint("host") as host:
            chat = await host.open(alice.agent)
            await chat.send("Hello Alice. What price do you ask for your bike?")
            with anyio.fail_after(300):
                async for message in host.messages():
                    return {"reply": message.text, "from": message.sender.name}
        raise AssertionError("unreachable")

    spec = RunSpec.define(
        id="acme.k8s-openclaw/v1",
        agents={
            "alice": openclaw(
                "You are Alice. You sell a bike. Answer in one sentence.", max_turns=1
            )
        },
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
    assert seen["images"]["alice"] == control_plane.images.ref("openclaw")
    assert {"agent", "agent.wait", "health"} <= set(seen["methods"])  # OpenClaw's own RPC
    ledger = verified(spec, outcome)
    [gate] = ledger.events(ReadinessGatePassed)
    assert gate.agents == ["alice"]
    [configured] = ledger.events(OpenClawAgentConfigured)
    assert configured.server_version == OPENCLAW_VERSION
    reply = outcome.exit.value
    assert reply["from"] == "alice" and reply["reply"].strip()
    committed = [m for m in ledger.events(RouterMessageCommitted) if m.sender_id == "agent:alice"]
    assert [m.parts[0] for m in committed] == [reply["reply"]]
    usage = [u for u in ledger.events(AgentModelUsage) if u.agent == "alice"]
    assert usage and all((u.prompt_tokens or 0) > 500 for u in usage)
    assert left == []
