"""The roster's typed accessor: the owner handle as the class asked for, or a typed refusal."""

from __future__ import annotations

import pytest

from controller.agents import AgentHandle, Observation, OwnerTypeError, Roster


class SomeGateway:
    pass


class OtherGateway:
    pass


def roster() -> Roster:
    gateway = SomeGateway()
    handle = AgentHandle("alice", "scripted", object(), gateway, Observation())
    return Roster({"alice": handle, "owner": handle})


def test_the_typed_accessor_returns_the_same_owner_handle_or_names_the_real_class() -> None:
    agents = roster()
    assert agents.owner("alice", SomeGateway) is agents.alice.owner
    assert agents.handle("alice", SomeGateway) is agents["alice"]
    refused = "alice runs scripted; its owner handle is SomeGateway, "
    with pytest.raises(OwnerTypeError, match=refused):
        agents.owner("alice", OtherGateway)
    with pytest.raises(KeyError, match="'bob' is not in the roster"):
        agents.owner("bob", SomeGateway)


def test_an_agent_named_like_the_accessor_is_still_reached_by_key() -> None:
    agents = roster()
    assert agents["owner"].name == "alice" and callable(agents.owner)
