"""The scripted policy engine: pure, seeded, one message at a time."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_images.scripted.policy import (
    OWNER,
    Delay,
    Incoming,
    Opening,
    PolicyEngine,
    Rule,
    ScriptedPolicy,
)


def texts(engine: PolicyEngine, message: Incoming) -> list[str]:
    return [send.text for send in engine.decide(message).sends]


def test_a_negotiator_proposes_when_addressed_and_counters_until_it_may_accept() -> None:
    policy = ScriptedPolicy.negotiator(offers=("70/30", "60/40"), accepts=("50/50",))
    alice = PolicyEngine(policy, name="alice", seed=1)
    assert texts(alice, Incoming("workload", "@alice make a proposal", "c-1")) == ["PROPOSE 70/30"]
    assert texts(alice, Incoming("bob", "PROPOSE 30/70", "c-1")) == ["PROPOSE 60/40"]
    assert texts(alice, Incoming("bob", "PROPOSE 40/60", "c-1")) == ["REJECT 40/60"]
    assert texts(alice, Incoming("bob", "PROPOSE 50/50", "c-1")) == ["ACCEPT 50/50"]
    assert alice.state()["accepted"] == ["50/50"] and alice.state()["rejected"] == 2


def test_a_negotiator_ignores_messages_addressed_to_others_and_verdicts() -> None:
    bob = PolicyEngine(ScriptedPolicy.negotiator(offers=("x",)), name="bob", seed=1)
    assert texts(bob, Incoming("workload", "@alice make a proposal to @bob", "c-1")) == []
    assert texts(bob, Incoming("alice", "ACCEPT x", "c-1")) == []
    assert texts(bob, Incoming("bob", "@bob propose", "c-1")) == []  # its own message


def test_concede_after_accepts_any_offer_once_enough_were_turned_down() -> None:
    carol = PolicyEngine(ScriptedPolicy.negotiator(concede_after=1), name="carol", seed=0)
    assert texts(carol, Incoming("bob", "PROPOSE a", "c")) == ["REJECT a"]
    assert texts(carol, Incoming("bob", "PROPOSE b", "c")) == ["ACCEPT b"]


def test_the_same_seed_gives_the_same_choices_and_delays() -> None:
    policy = ScriptedPolicy(
        rules=(Rule(texts=tuple(f"reply {i}" for i in range(20))),),
        delay=Delay(min_ms=1, max_ms=500),
    )

    def run(seed: int, name: str = "ann") -> list[tuple[str, float]]:
        engine = PolicyEngine(policy, name=name, seed=seed)
        return [
            (send.text, send.delay_s)
            for i in range(30)
            for send in engine.decide(Incoming("ben", f"m{i}", "c")).sends
        ]

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert run(7) != run(7, "cat")  # each agent's RNG is its own


def test_silence_rule_limits_and_send_budget_are_followed() -> None:
    quiet = PolicyEngine(
        ScriptedPolicy(rules=(Rule(texts=("hi",)),), silence=1.0), name="a", seed=0
    )
    assert texts(quiet, Incoming("b", "hello", "c")) == []
    limited = PolicyEngine(ScriptedPolicy(rules=(Rule(texts=("hi",), limit=2),)), name="a", seed=0)
    assert [texts(limited, Incoming("b", "x", "c")) for _ in range(3)] == [["hi"], ["hi"], []]
    budget = PolicyEngine(
        ScriptedPolicy(rules=(Rule(texts=("hi",)),), max_sends=1), name="a", seed=0
    )
    assert [texts(budget, Incoming("b", "x", "c")) for _ in range(2)] == [["hi"], []]


def test_templates_rules_by_sender_stop_and_instructions_with_peers() -> None:
    policy = ScriptedPolicy(
        rules=(
            Rule(match="^stop$", senders=(OWNER,), action="stop"),
            Rule(match="^greet", senders=(OWNER,), texts=("hello {sender}",), peers=("bob",)),
            Rule(match="ping", senders=("bob",), texts=("{me} got {text} #{count}",)),
        ),
        openings=(Opening(peers=("bob",), text="hi bob"),),
    )
    ann = PolicyEngine(policy, name="ann", seed=0)
    assert [(o.text, o.peers) for o in ann.openings()] == [("hi bob", ("bob",))]
    greet = ann.decide(Incoming(OWNER, "greet"))
    assert [(o.text, o.peers, o.conversation_id) for o in greet.sends] == [
        ("hello owner", ("bob",), None)
    ]
    assert texts(ann, Incoming("bob", "ping", "c-9")) == ["ann got ping #2"]
    assert texts(ann, Incoming("cat", "ping", "c-9")) == []
    assert ann.decide(Incoming(OWNER, "stop")).stop


@pytest.mark.parametrize(
    "bad",
    [
        {"rules": [{"action": "say"}]},
        {"rules": [{"match": "(", "texts": ["x"]}]},
        {"delay": {"min_ms": 5, "max_ms": 1}},
        {"silence": 2},
        {"unknown": 1},
    ],
)
def test_a_malformed_policy_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises((ValidationError, ValueError)):
        ScriptedPolicy.model_validate(bad)
