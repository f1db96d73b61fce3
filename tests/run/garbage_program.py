"""A module whose program writes garbage on its own channel to the controller, then waits.

``GARBAGE`` (replaced by the test) picks what it writes: ``huge`` announces a frame of 1 GiB,
``junk`` sends a frame that is not JSON.
"""

from __future__ import annotations

import struct
from typing import Any

import anyio

from controller import RunContext, RunSpec, ScriptedPolicy, scripted

GARBAGE = "@GARBAGE@"


async def scribble(ctx: RunContext) -> None:
    link: Any = object.__getattribute__(ctx.events, "_society_link")
    sock = link.channel._sock
    if GARBAGE == "huge":
        sock.sendall(struct.pack(">I", 1 << 30))
    else:
        sock.sendall(struct.pack(">I", 5) + b"{nope")
    await anyio.sleep(60)


run_spec = RunSpec.define(
    id="garbage.program/v1",
    agents={"quiet": scripted(ScriptedPolicy())},
    execute=scribble,
)
