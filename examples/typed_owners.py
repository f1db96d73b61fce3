"""Four runtimes, each owner handle reached through its own class; mypy --strict checks this file.

    society run examples/typed_owners.py

``ctx.agents.<name>.owner`` is typed ``Any``: roster names are data, so no type checker can
know them. ``ctx.agents.owner(name, GatewayClass)`` returns the same object typed, and raises
``OwnerTypeError`` when the agent runs another runtime. Needs OpenClaw
(``scripts/install-openclaw.sh``) and the local model (``scripts/install-llm.sh``); no key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from controller import (
    LLMOwner,
    OpenClawRPC,
    PeerObservation,
    PeerObservations,
    Rule,
    RunContext,
    RunSpec,
    ScriptedOwner,
    ScriptedPolicy,
    llm,
    openclaw,
    peer,
    scripted,
)

POLICY = Path(__file__).parent / "peers" / "tally.py"


async def look(ctx: RunContext) -> dict[str, Any]:
    """Ask each runtime's owner handle what it can say; the peer's only says what it published."""
    sam: OpenClawRPC = ctx.agents.owner("sam", OpenClawRPC)
    lea: LLMOwner = ctx.agents.owner("lea", LLMOwner)
    eve: PeerObservations = ctx.agents.owner("eve", PeerObservations)
    bob: ScriptedOwner = ctx.agents.owner("bob", ScriptedOwner)

    await bob.instruct("greet")  # bob's rule answers the owner by greeting eve
    seen: PeerObservation = await eve.observe()
    with anyio.fail_after(30):
        while seen.received < 1:  # a peer publishes; it is never asked
            await anyio.sleep(0.2)
            seen = await eve.observe()
    sessions = await sam.call("sessions.list", {})
    return {
        "openclaw": {"server": sam.hello.get("server"), "sessions": _count(sessions)},
        "llm": {"model": (await lea.state()).get("model")},
        "peer": {"received": seen.received, "published": seen.published},
        "scripted": {"sent": (await bob.state()).get("sent")},
    }


def _count(sessions: object) -> int | None:
    if isinstance(sessions, dict) and isinstance(sessions.get("sessions"), list):
        return len(sessions["sessions"])
    return None


greeter = ScriptedPolicy(
    rules=(Rule(match="^greet$", senders=("owner",), texts=("hi eve",), peers=("eve",)),)
)

run_spec = RunSpec.define(
    id="acme.typed-owners/v1",
    agents={
        "sam": openclaw("You are Sam. You sell a used bike.", max_turns=1),
        "lea": llm("You are Lea. You buy a used bike."),
        "eve": peer("tally.py", "respond", files={"tally.py": POLICY}),
        "bob": scripted(greeter),
    },
    execute=look,
)
