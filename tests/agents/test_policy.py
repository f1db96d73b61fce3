"""The scripted policy engine: pure, seeded, one message at a time."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agent_images.scripted.engine import Incoming, PolicyEngine
from society_sandbox.runtimes.scripted import (
    ADDRESSED_PROPOSAL,
    OWNER,
    Opening,
    ReplyDelay,
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
        delay=ReplyDelay(min_ms=1, max_ms=500),
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


PLAIN_ADDRESSED_PROPOSAL = r"@{me}\b.*\bpropos"
"""The negotiator's rule as it was written first: the behaviour the linear form keeps."""


@given(
    st.lists(
        st.sampled_from(["@alice", "@alicex", "alice", "@", "propos", "xpropos", " ", "\n", "."]),
        max_size=14,
    ).map("".join)
)
def test_the_negotiators_linear_rule_matches_exactly_what_the_plain_rule_matched(
    text: str,
) -> None:
    plain = re.compile(PLAIN_ADDRESSED_PROPOSAL.replace("{me}", "alice"))
    linear = re.compile(ADDRESSED_PROPOSAL.replace("{me}", "alice"))
    assert bool(linear.search(text)) == bool(plain.search(text))


HOSTILE_PART = """
import sys, time
from agent_images.scripted.engine import Incoming, PolicyEngine
from society_sandbox.runtimes.scripted import ScriptedPolicy
alice = PolicyEngine(ScriptedPolicy.negotiator(offers=("x",)), name="alice", seed=1)
text = "@alice " * (1024 * 1024 // 7)  # 1 MiB of addresses, the word never comes
print(len(text), [s.text for s in alice.decide(Incoming("mallory", text, "c")).sends])
print([s.text for s in alice.decide(Incoming("mallory", text + "propose!", "c")).sends])
"""


def test_a_one_mib_part_of_addresses_is_decided_without_backtracking_over_it() -> None:
    # The plain rule needs ~30 min here (1.9 s for 32 KiB, quadratic); a linear one well
    # under a second. The bound is generous for a loaded machine and still fails the old rule.
    done = subprocess.run(
        [sys.executable, "-c", HOSTILE_PART],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.split("\n")[:2] == [f"{1024 * 1024 // 7 * 7} []", "['PROPOSE x']"]
