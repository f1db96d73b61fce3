"""One silent scripted agent; the program raises once every agent is ready."""

from __future__ import annotations

from controller import RunSpec
from controller.agents import scripted
from controller.run import RunContext


class ExperimentBroke(Exception):
    reason = "experiment-broke"


async def fail(ctx: RunContext) -> None:
    raise ExperimentBroke("the experiment gave up on purpose")


run_spec = RunSpec.define(
    id="lifecycle-test.failing/v1",
    agents={"alice": scripted()},
    execute=fail,
)
