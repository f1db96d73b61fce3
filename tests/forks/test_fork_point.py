"""The fork point in a real local run: from ``ctx.fork.reached()`` on, messages after N commit but
wait for delivery until the block ends; a fork point that has passed is a typed failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from controller import Rule, Run, RunContext, RunSpec, ScriptedPolicy, scripted
from controller.events.network import RouterMessageCommitted, RouterMessagesDelivered
from controller.events.run import ProgramFailed, RunStarted
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished
from controller.run.fork import ForkRequest
from ledger import open_ledger_artifacts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

echo = ScriptedPolicy(rules=(Rule(match=r"^ping", texts=("pong",)),))
AT = 1


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


def fork_at(at: int) -> ForkRequest:
    return ForkRequest(
        parent_ledger="/nonexistent/ledger/main",
        parent_run_id="sr-" + "0" * 32,
        parent_head_digest="0" * 64,
        at=at,
    )


async def test_a_reply_after_the_fork_point_commits_but_is_held_until_the_block_ends(
    tmp_path: Path,
) -> None:
    seen: dict[str, Any] = {}

    async def program(ctx: RunContext) -> None:
        assert ctx.fork is not None and ctx.fork.at == AT
        point = ctx.fork.reached()
        async with ctx.network.endpoint("host") as host:
            conversation = await host.open(ctx.agents.ann.agent)
            await conversation.send("ping")  # message 1: the fork point
            async with point:
                with anyio.fail_after(30):  # ann's pong (message 2) commits...
                    async for record in ctx.ledger.events(RouterMessageCommitted):
                        if record.router_sequence == 2:
                            break
                with anyio.move_on_after(1.0):  # ...but does not reach the host in the block
                    async for message in host.messages():
                        seen["inside"] = message.text
            with anyio.fail_after(30):
                async for message in host.messages():
                    seen["after"] = message.text
                    break

    spec = RunSpec.define(id="acme.fork-point/v1", agents={"ann": scripted(echo)}, execute=program)
    outcome = await Run.execute(
        spec, platform=LocalPlatform(), artifact_root=tmp_path, seed=3, fork=fork_at(AT)
    )

    assert isinstance(outcome, ProgramFinished) and outcome.succeeded, outcome
    assert seen == {"after": "pong"}
    ledger = open_ledger_artifacts(spec.catalog, outcome.receipt.ledger_dir)
    [started] = ledger.events(RunStarted)
    assert started.fork is not None and started.fork.at == AT
    assert started.fork.parent_run_id == fork_at(AT).parent_run_id
    records = [r.event for r in ledger.records]
    committed = next(
        i
        for i, e in enumerate(records)
        if isinstance(e, RouterMessageCommitted) and e.router_sequence == 2
    )
    delivered = next(
        i
        for i, e in enumerate(records)
        if isinstance(e, RouterMessagesDelivered) and "m-2" in e.message_ids
    )
    assert committed < delivered


async def test_a_fork_point_asked_for_after_it_passed_fails_the_program_with_its_reason(
    tmp_path: Path,
) -> None:
    async def program(ctx: RunContext) -> None:
        assert ctx.fork is not None
        async with ctx.network.endpoint("host") as host:
            conversation = await host.open(ctx.agents.ann.agent)
            await conversation.send("ping")
            await conversation.send("ping again")
            ctx.fork.reached()

    spec = RunSpec.define(id="acme.fork-late/v1", agents={"ann": scripted(echo)}, execute=program)
    outcome = await Run.execute(
        spec, platform=LocalPlatform(), artifact_root=tmp_path, seed=3, fork=fork_at(1)
    )

    assert isinstance(outcome, ProgramFinished) and not outcome.succeeded
    ledger = open_ledger_artifacts(spec.catalog, outcome.receipt.ledger_dir)
    [failed] = ledger.events(ProgramFailed)
    assert failed.reason == "fork-point-passed" and "next step" in failed.detail
