"""A program that uses ``ctx`` the ways a module's program may, run in the module's process.

Two endpoints talk through a link shaped by the module's own policy (it drops what says
``drop``); the receiver reports what reached it as a ``shaped.received/v1`` event, and the
program reads that event back from ``ctx.ledger``.
"""

from __future__ import annotations

from typing import ClassVar

import anyio

from controller import Event, EventCatalog, RunContext, RunSpec, ScriptedPolicy, scripted
from controller.network.links import Deliver, Drop, LinkDelivery, Verdict


class Received(Event):
    tag: ClassVar[str] = "shaped.received/v1"

    texts: list[str]


def no_drops(delivery: LinkDelivery) -> Verdict:
    if "drop" in delivery.message.text:
        return Drop("said drop")
    return Deliver()


async def shaped(ctx: RunContext) -> dict[str, object]:
    links = ctx.network.links
    async with ctx.network.endpoint("sender") as sender, ctx.network.endpoint("receiver") as to:
        async with links.shape(sender.participant, to.participant, no_drops, "no drops"):
            conversation = await sender.open(to.participant)
            for text in ("keep one", "drop this", "keep two"):
                await conversation.send(text)
            texts: list[str] = []
            with anyio.fail_after(10):
                async for message in to.messages():
                    texts.append(message.text)
                    if message.text == "keep two":
                        break
    record = await ctx.events.emit(Received(texts=texts))
    read_back = [event.texts async for event in _received(ctx)]
    return {"sequence": record.sequence, "read_back": read_back, "run": ctx.ledger.run_id}


async def _received(ctx: RunContext):  # type: ignore[no-untyped-def]
    async for record in ctx.ledger.records():
        if isinstance(record.event, Received):
            yield record.event
            return


run_spec = RunSpec.define(
    id="shaped.program/v1",
    events=[EventCatalog.make(Received)],
    agents={"idle": scripted(ScriptedPolicy())},
    execute=shaped,
)
