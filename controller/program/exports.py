"""What the module process may do with the controller's objects: the whole trust boundary.

The program's ``ctx`` in the module process is made of proxies; each names an object the
controller keeps (a handle) and may use only the members listed here for its class, each in one
way:

- ``STATIC``: a value read once, when the handle is made (an endpoint's name);
- ``PROPERTY``: read on each access (``ctx.ledger.record_count``);
- ``SYNC``/``ASYNC``: a method call, its arguments and result data or handles;
- ``CONTEXT``: a method returning an ``async with`` block the controller holds open until the
  module leaves it (``ctx.network.endpoint(...)``, ``links.disable(...)``);
- ``ITERATOR``: a method returning an async iterator the module pulls item by item;
- ``ENTER``/``EXIT``: the object is itself an ``async with`` block (a fork point).

A link policy the module passes to ``links.shape`` stays in the module process: the router asks
it for each delivery's verdict (``serve.RemotePolicy``).

Nothing else is reachable: not the ledger writer, the router, the signer or the platform.
"""

from __future__ import annotations

from collections.abc import Mapping

STATIC = "static"
PROPERTY = "property"
SYNC = "sync"
ASYNC = "async"
CONTEXT = "context"
ITERATOR = "iterator"
ENTER = "enter"
EXIT = "exit"

_OWNER: Mapping[str, str] = {"agent": STATIC, "report": PROPERTY, "state": ASYNC}

EXPORTED: Mapping[str, Mapping[str, str]] = {
    "controller.network.endpoint:Network": {
        "links": PROPERTY,
        "participant": SYNC,
        "endpoint": CONTEXT,
    },
    "controller.network.endpoint:Endpoint": {
        "name": STATIC,
        "participant": STATIC,
        "open": ASYNC,
        "conversation": SYNC,
        "messages": ITERATOR,
    },
    "controller.network.endpoint:Conversation": {
        "endpoint": STATIC,
        "conversation_id": STATIC,
        "participants": STATIC,
        "send": ASYNC,
    },
    "controller.network.links:LinkController": {
        "disable": CONTEXT,
        "delay": CONTEXT,
        "hold": CONTEXT,
        "shape": CONTEXT,
    },
    "controller.run.context:CustomerEvents": {"emit": ASYNC},
    "controller.run.context:LedgerView": {
        "run_id": STATIC,
        "ref": STATIC,
        "record_count": PROPERTY,
        "receipt": SYNC,
        "records": ITERATOR,
    },
    "controller.run.fork:Fork": {
        "parent_run_id": STATIC,
        "parent_head_digest": STATIC,
        "parent_ledger": STATIC,
        "at": STATIC,
        "reached": SYNC,
    },
    "controller.run.fork:ForkPoint": {"__aenter__": ENTER, "__aexit__": EXIT},
    "controller.agents.termination:Observation": {"done": SYNC, "peek": SYNC, "wait": ASYNC},
    "controller.agents.scripted:ScriptedOwner": {**_OWNER, "instruct": ASYNC, "stop": ASYNC},
    "controller.agents.llm:LLMOwner": {**_OWNER, "instruct": ASYNC, "stop": ASYNC},
    "controller.agents.peer:PeerObservations": {**_OWNER, "observe": ASYNC},
    "controller.agents.byo:BYOOwner": {**_OWNER, "instruct": ASYNC, "stop": ASYNC},
    "society_sandbox.runtimes.openclaw_rpc:OpenClawRPC": {
        "hello": STATIC,
        "events": PROPERTY,
        "methods": PROPERTY,
        "call": ASYNC,
        "agent": ASYNC,
        "agent_wait": ASYNC,
    },
    "controller.agents.nanoclaw_owner:NanoClawOwner": {"session": CONTEXT, "hello": ASYNC},
    "controller.agents.nanoclaw_owner:NanoClawSession": {
        "follow_up": ASYNC,
        "close": ASYNC,
        "outputs": ITERATOR,
        "result": ASYNC,
    },
}
"""``module:qualname`` of an exported class -> its members and how each is used."""


def class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def members(cls: type) -> Mapping[str, str] | None:
    """The exported members of exactly ``cls`` (not of a subclass), or ``None``."""
    return EXPORTED.get(class_name(cls))
