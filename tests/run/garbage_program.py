"""A module whose program writes garbage on its own channel to the controller, then waits.

``GARBAGE`` (replaced by the test) picks what it writes: ``huge`` announces a frame of 1 GiB,
``junk`` sends a frame that is not JSON.
"""

from __future__ import annotations

from typing import Any

import anyio

from controller import RunContext, RunSpec, ScriptedPolicy, scripted
from society_sandbox.framing import LENGTH

GARBAGE = "@GARBAGE@"


async def scribble(ctx: RunContext) -> None:
    link: Any = object.__getattribute__(ctx.events, "_society_link")
    sock = link.channel._sock
    if GARBAGE == "huge":
        sock.sendall(LENGTH.pack(1 << 30))
    else:
        sock.sendall(LENGTH.pack(5) + b"{nope")
    await anyio.sleep(60)


run_spec = RunSpec.define(
    id="garbage.program/v1",
    agents={"quiet": scripted(ScriptedPolicy())},
    execute=scribble,
)
