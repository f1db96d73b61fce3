"""What a start-up timeout says about an agent's pod that has not run: the scheduler's verdict
when no node takes it, the containers' waiting reasons otherwise. Pod objects as the API
server returns them; no cluster."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes import sandbox as observed
from controller.platforms.kubernetes.kube import Informer, Obj

pytestmark = pytest.mark.anyio

VERDICT = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
    "{society.test/kwok: fake}. preemption: 0/2 nodes are available: 1 No preemption victims "
    "found for incoming pod, 1 Preemption is not helpful for scheduling."
)


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


def pod(agent: str, **status: Any) -> Obj:
    labels = {objects.AGENT_LABEL: agent, objects.ROLE_LABEL: "agent"}
    return {"metadata": {"name": agent, "uid": f"uid-{agent}", "labels": labels}, "status": status}


def unscheduled(agent: str) -> Obj:
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return pod(agent, phase="Pending", conditions=[{**scheduled, "message": VERDICT}])


def test_an_unschedulable_pod_carries_the_schedulers_verdict() -> None:
    assert observed.unschedulable(unscheduled("agent-091")) == VERDICT
    assert observed.waiting(unscheduled("agent-091")) == (
        f"pod agent-091 Pending, unschedulable: {VERDICT}"
    )


def test_a_scheduled_pod_is_not_unschedulable_and_names_its_waiting_containers() -> None:
    scheduled = {"type": "PodScheduled", "status": "True"}
    creating = {"waiting": {"reason": "ContainerCreating"}}
    starting = pod(
        "bob",
        phase="Pending",
        conditions=[scheduled],
        containerStatuses=[{"name": objects.AGENT_CONTAINER, "state": creating}],
    )
    assert observed.unschedulable(starting) is None
    assert (
        observed.waiting(starting)
        == f"pod bob Pending: {objects.AGENT_CONTAINER} ContainerCreating"
    )
    assert observed.waiting(pod("carol", phase="Running", conditions=[scheduled])) == ""


class ListedOnly:
    """A ``Kube`` whose list answers these objects and whose watch never changes anything."""

    def __init__(self, items: dict[str, list[Obj]]) -> None:
        self.items = items

    async def list(self, kind: str, namespace: str, **_: Any) -> tuple[list[Obj], str]:
        return self.items.get(kind, []), "1"

    async def watch(self, kind: str, namespace: str, **_: Any) -> Any:
        await anyio.sleep_forever()
        yield  # pragma: no cover


async def test_the_start_up_timeouts_reason_names_the_pod_and_why_no_node_takes_it() -> None:
    sandbox = {
        "metadata": {"name": "agent-091", "labels": {objects.AGENT_LABEL: "agent-091"}},
        "status": {
            "conditions": [{"type": "Ready", "status": "False", "message": "Pod not ready"}]
        },
    }
    kube: Any = ListedOnly({"Sandbox": [sandbox], "Pod": [unscheduled("agent-091"), pod("alice")]})
    sandboxes, pods = (
        Informer(kube, kind, "sr-test", index=objects.AGENT_LABEL) for kind in ("Sandbox", "Pod")
    )
    async with anyio.create_task_group() as tasks:
        for informer in (sandboxes, pods):
            tasks.start_soon(informer.run)
            await informer.synced.wait()
        why = observed.describe(sandboxes, pods, "agent-091")
        tasks.cancel_scope.cancel()
    assert why == f"Ready=False Pod not ready; pod agent-091 Pending, unschedulable: {VERDICT}"


def test_a_pod_that_exited_names_each_terminated_containers_reason_and_exit_code() -> None:
    oom = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    error = {"terminated": {"reason": "Error", "exitCode": 1, "message": "no router\n"}}
    ended = pod(
        "agent-236",
        phase="Running",
        containerStatuses=[
            {"name": objects.AGENT_CONTAINER, "state": error},
            {"name": objects.KEEPER_CONTAINER, "state": {"running": {}}},
            {"name": "other", "state": oom},
        ],
    )
    assert observed.exited(ended) == (
        f"pod agent-236 Running; {objects.AGENT_CONTAINER} Error, exit code 1 (no router); "
        "other OOMKilled, exit code 137"
    )
