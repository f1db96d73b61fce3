"""The readiness gate: all or none, and an agent withdrawn before dispatch (its sandbox replaced)
keeps it waiting until it is ready again."""

from __future__ import annotations

import anyio
import pytest

from controller.run.readiness import ReadinessGate

pytestmark = pytest.mark.anyio


async def test_a_withdrawn_agent_keeps_the_gate_waiting_until_it_is_ready_again() -> None:
    gate = ReadinessGate(["alice", "bob"])
    gate.ready("alice")
    gate.ready("bob")  # every agent ready: the gate has settled ...
    gate.withdraw("alice")  # ... but alice's sandbox was lost before the gate was decided
    with anyio.move_on_after(0.2) as waited:
        await gate.wait()
    assert waited.cancelled_caught and not gate.closed
    gate.ready("alice")  # her replacement is ready
    with anyio.fail_after(1):
        result = await gate.wait()
    assert result.passed and result.ready == ("alice", "bob")


async def test_a_withdrawn_agent_that_fails_fails_the_gate() -> None:
    gate = ReadinessGate(["alice", "bob"])
    gate.ready("bob")
    gate.ready("alice")
    gate.withdraw("alice")
    assert gate.fail("alice", "startup-timeout", "no replacement pod")
    result = await gate.wait()
    assert not result.passed and result.ready == ("bob",)
    assert [f.reason for f in result.failures] == ["startup-timeout"]


async def test_a_decided_gate_ignores_a_withdrawal() -> None:
    gate = ReadinessGate(["alice"])
    gate.ready("alice")
    assert (await gate.wait()).passed
    gate.withdraw("alice")
    assert gate.close().passed
