"""The llm agent's bounded context, its reply cleaning, and the descriptor's choices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_images.llm.context import OWNER, ConversationContext, Turn, clean_reply
from controller.agents import RuntimeDescriptorError
from controller.agents.llm import llm
from controller.modelgateway.service import MODEL_SERVICE
from society_sandbox.runtimes.llm import CONFIG_FILE, IDENTITY_FILE, ContextPolicy, LLMConfig

ROOT = Path(__file__).resolve().parents[2]


def test_keep_last_drops_the_oldest_messages_and_counts_them() -> None:
    context = ConversationContext("c-1", ("bob",), ContextPolicy(keep_last_messages=3))
    for number in range(5):
        context.add(Turn("bob", f"message {number}"))
    assert [turn.text for turn in context.turns] == ["message 2", "message 3", "message 4"]
    assert (context.dropped, context.clipped) == (2, 0)


def test_a_long_message_is_clipped_to_the_policys_length() -> None:
    context = ConversationContext("c-1", ("bob",), ContextPolicy(max_message_chars=20))
    context.add(Turn("bob", "x" * 100))
    assert len(context.turns[0].text) == 20 and context.clipped == 1


def test_the_chat_request_alternates_roles_and_ends_on_a_user_turn() -> None:
    context = ConversationContext("c-1", ("bob", "cy"), ContextPolicy())
    context.add(Turn("bob", "40k?"))
    context.add(Turn("cy", "60k."))
    context.add(Turn("ada", "50k then.", own=True))
    context.add(Turn(OWNER, "Hold at 50k."))
    messages = context.chat("You are Ada.")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "Bob: 40k?\nCy: 60k."
    assert messages[3]["content"] == "(private note from your owner) Hold at 50k."
    context.add(Turn("ada", "Agreed.", own=True))
    assert context.chat("You are Ada.")[-1] == {"role": "user", "content": "(continue)"}


@pytest.mark.parametrize(
    ("raw", "cut_off", "sent"),
    [
        ("Ada: I propose 50k.", False, "I propose 50k."),
        ("Ada, Ben and Cy: 50k.\nBen: What about 90k?", False, "50k."),
        ("PASS", False, None),
        ("(Ben's turn)\nI agree with 60k.\n(Ada nods)", False, "I agree with 60k."),
        ("  ", False, None),
        ("We should settle at 55k. Marketing needs the rest and", True, "We should settle at 55k."),
        ("We should", True, "We should…"),
        ("Budget is 40k: final.", False, "Budget is 40k: final."),
    ],
)
def test_a_reply_is_cleaned_before_it_is_sent(raw: str, cut_off: bool, sent: str | None) -> None:
    assert clean_reply(raw, 400, cut_off=cut_off) == sent


def test_an_llm_agent_writes_its_identity_and_configuration_and_uses_the_model_service() -> None:
    agent = llm("You are Ada.", instructions="Agree on a budget.")
    assert agent.files[IDENTITY_FILE] == b"You are Ada."
    assert LLMConfig.model_validate(json.loads(agent.files[CONFIG_FILE])) == agent.config
    assert agent.services == (MODEL_SERVICE,) and agent.provider is None
    assert "transcript.jsonl" in agent.harvest.files


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"provider": "nobody"}, "unknown-provider"),
        ({"model": "gpt-4o"}, "unknown-model"),
        ({"files": {IDENTITY_FILE: "x"}}, "bad-path"),
    ],
)
def test_a_bad_llm_descriptor_fails_when_defined(kwargs: dict[str, object], reason: str) -> None:
    with pytest.raises(RuntimeDescriptorError) as raised:
        llm("You are Ada.", **kwargs)  # type: ignore[arg-type]
    assert raised.value.reason == reason


def test_a_named_provider_is_referenced_by_its_key_name_only() -> None:
    agent = llm("You are Ada.", provider="openai", model="gpt-4.1-mini")
    assert agent.provider is not None
    assert (agent.provider.model, agent.provider.api_key_name) == ("gpt-4.1-mini", "OPENAI_API_KEY")


def test_the_agent_program_loads_no_kernel_router_platform_or_gateway() -> None:
    probe = "import sys, agent_images.llm.agent\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    forbidden = [
        module
        for module in out.stdout.split()
        if module.split(".")[0] in ("kubernetes", "temporalio", "llama_cpp")
        or module.startswith(
            (
                "controller.run",
                "controller.platforms",
                "controller.profiles",
                "controller.lifecycle",
                "controller.agents",
                "controller.modelgateway",
                "controller.network.router",
            )
        )
    ]
    assert forbidden == []
