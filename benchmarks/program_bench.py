"""What running the module in a sandboxed process of its own costs, next to in-process.

    .venv/bin/python benchmarks/program_bench.py [--messages 500] [--rounds 3]

Prints, each next to its same-run baseline (the same module imported and run in this process, as
``Run.execute`` runs a spec a Python caller built) and the ratio:

- loading: importing the module and defining its ``run_spec`` (isolated: starting the sandbox,
  importing there, the spec crossing as data and being defined again);
- the program: an endpoint sends ``--messages`` messages to another, which reads them all, then
  the program emits one event per message (each send, take and emit is a call to the controller
  when isolated); the time is measured inside the program.

Best of ``--rounds`` each, on the local profile with one idle scripted agent.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from controller.platforms.local import LocalPlatform
from controller.program.process import isolated_module
from controller.run import Run, load_run_spec
from controller.run.outcomes import ProgramFinished, Success

MODULE = """
import time
from typing import ClassVar

from controller import Event, EventCatalog, RunContext, RunSpec, ScriptedPolicy, scripted

MESSAGES = {messages}


class Tick(Event):
    tag: ClassVar[str] = "bench.tick/v1"
    n: int


async def program(ctx: RunContext) -> float:
    started = time.perf_counter()
    async with ctx.network.endpoint("a") as a, ctx.network.endpoint("b") as b:
        conversation = await a.open(b.participant)
        for n in range(MESSAGES):
            await conversation.send(f"message {{n}}")
        taken = 0
        async for _ in b.messages():
            taken += 1
            if taken == MESSAGES:
                break
    for n in range(MESSAGES):
        await ctx.events.emit(Tick(n=n))
    return time.perf_counter() - started


run_spec = RunSpec.define(
    id="bench.program/v1",
    events=[EventCatalog.make(Tick)],
    agents={{"idle": scripted(ScriptedPolicy())}},
    execute=program,
)
"""


async def in_process(module: Path, root: Path) -> tuple[float, float]:
    started = time.perf_counter()
    spec = load_run_spec(module)
    loaded = time.perf_counter() - started
    return loaded, await _program(spec, root)


async def isolated(module: Path, root: Path) -> tuple[float, float]:
    started = time.perf_counter()
    async with isolated_module(module, sandboxed=True) as spec:
        loaded = time.perf_counter() - started
        return loaded, await _program(spec, root)


async def _program(spec: Any, root: Path) -> float:
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    seconds = outcome.exit.value
    assert isinstance(seconds, float), seconds
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        module = folder / "bench_module.py"
        module.write_text(MODULE.format(messages=args.messages))
        here = [anyio.run(in_process, module, folder / "runs") for _ in range(args.rounds)]
        there = [anyio.run(isolated, module, folder / "runs") for _ in range(args.rounds)]
    rows = (
        ("load the module", min(h[0] for h in here), min(t[0] for t in there)),
        (
            f"program: {args.messages} sends, takes, emits",
            min(h[1] for h in here),
            min(t[1] for t in there),
        ),
    )
    print(f"{'':40} {'in-process (s)':>15} {'own process (s)':>16} {'ratio':>7}")
    for label, baseline, measured in rows:
        print(f"{label:40} {baseline:15.3f} {measured:16.3f} {measured / baseline:6.2f}x")


if __name__ == "__main__":
    main()
