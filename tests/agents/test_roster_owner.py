"""The roster's typed accessor: the owner handle as the class asked for, or a typed refusal."""

from __future__ import annotations

import pytest

from controller.agents import AgentHandle, Observation, OwnerTypeError, Roster


class SomeOwner:
    pass


class OtherOwner:
    pass


def roster() -> Roster:
    owner = SomeOwner()
    handle = AgentHandle("alice", "scripted", object(), owner, Observation())
    return Roster({"alice": handle, "owner": handle})


def test_the_typed_accessor_returns_the_same_owner_handle_or_names_the_real_class() -> None:
    agents = roster()
    assert agents.owner("alice", SomeOwner) is agents.alice.owner
    assert agents.handle("alice", SomeOwner) is agents["alice"]
    refused = "alice runs scripted; its owner handle is SomeOwner, "
    with pytest.raises(OwnerTypeError, match=refused):
        agents.owner("alice", OtherOwner)
    with pytest.raises(KeyError, match="'bob' is not in the roster"):
        agents.owner("bob", SomeOwner)


def test_an_agent_named_like_the_accessor_is_still_reached_by_key() -> None:
    agents = roster()
    assert agents["owner"].name == "alice" and callable(agents.owner)
