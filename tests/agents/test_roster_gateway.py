"""The roster's typed accessor: the gateway as the class asked for, or a typed refusal."""

from __future__ import annotations

import pytest

from controller.agents import AgentHandle, GatewayTypeError, Observation, Roster


class SomeGateway:
    pass


class OtherGateway:
    pass


def roster() -> Roster:
    gateway = SomeGateway()
    handle = AgentHandle("alice", "scripted", object(), gateway, Observation())
    return Roster({"alice": handle, "gateway": handle})


def test_the_typed_accessor_returns_the_same_gateway_or_names_the_real_class() -> None:
    agents = roster()
    assert agents.gateway("alice", SomeGateway) is agents.alice.gateway
    assert agents.handle("alice", SomeGateway) is agents["alice"]
    with pytest.raises(GatewayTypeError, match="alice runs scripted; its gateway is SomeGateway, "):
        agents.gateway("alice", OtherGateway)
    with pytest.raises(KeyError, match="'bob' is not in the roster"):
        agents.gateway("bob", SomeGateway)


def test_an_agent_named_like_the_accessor_is_still_reached_by_key() -> None:
    agents = roster()
    assert agents["gateway"].name == "alice" and callable(agents.gateway)
