"""Programs on the stock ``openai`` and ``anthropic`` SDKs, in their sandboxes, reach the run's
model through the launcher's relay: metered, budgeted, and answered into the ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from controller import AgentModelUsage, Run, RunContext, RunSpec, byo
from controller.events.network import RouterMessageCommitted
from controller.modelgateway.events import AgentModelBudgetReached
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Success
from ledger import open_ledger_artifacts

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def quick_start() -> str:
    """The client-mode quick start of docs/runtimes.md, as written there."""
    text = (ROOT / "docs" / "runtimes.md").read_text(encoding="utf-8")
    after = text[text.index("A client-mode program in ten lines") :]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


ANTHROPIC_AGENT = """
import anyio
from anthropic import Anthropic
from society_sandbox.network.client import connect_sandbox_agent

client = Anthropic()  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY come from the sandbox


async def main() -> None:
    async with connect_sandbox_agent() as session:
        async for delivery in session.deliveries():
            try:
                answer = await anyio.to_thread.run_sync(
                    lambda: client.messages.create(
                        model="claude-sonnet-4-5",
                        max_tokens=16,
                        messages=[{"role": "user", "content": delivery.text}],
                    )
                )
                text = "ok: " + answer.content[0].text
            except Exception as exc:
                text = f"refused: {type(exc).__name__} {getattr(exc, 'status_code', '')}"
            await session.send(delivery.conversation_id, text)


anyio.run(main)
"""


def ledger_of(spec: RunSpec, outcome: Any) -> Any:
    receipt = outcome.receipt
    return open_ledger_artifacts(
        spec.catalog,
        receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=receipt.public_key,
    )


async def ask(
    ctx: RunContext, agent: str, texts: list[str], *, until: str | None = None
) -> list[str]:
    """Each of ``texts`` to ``agent`` in turn, and its reply; stops after a reply starting with
    ``until``."""
    replies: list[str] = []
    async with ctx.network.endpoint("workload") as workload:
        chat = await workload.open(getattr(ctx.agents, agent).agent)
        for text in texts:
            await chat.send(text)
            with anyio.fail_after(240):
                async for message in workload.messages():
                    replies.append(message.text)
                    break
            if until is not None and replies[-1].startswith(until):
                break
    return replies


async def test_a_stock_openai_sdk_program_answers_through_the_gateway_and_is_metered(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> list[str]:
        return await ask(ctx, "ada", ["Say hello."])

    spec = RunSpec.define(
        id="acme.byo-openai/v1",
        agents={
            "ada": byo(
                ("python", "agent.py"),
                files={"agent.py": quick_start()},
                packages=("openai>=1",),
                provider="local",
            )
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    (reply,) = outcome.exit.value
    assert reply.strip()
    ledger = ledger_of(spec, outcome)
    by_ada = [e.parts for e in ledger.events(RouterMessageCommitted) if e.sender_id == "agent:ada"]
    assert by_ada == [[reply]]
    usage = list(ledger.events(AgentModelUsage))
    assert [u.agent for u in usage] == ["ada"] and usage[0].completion_tokens > 0


async def test_a_stock_anthropic_sdk_program_is_refused_past_its_budget_with_usage_intact(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> list[str]:
        return await ask(ctx, "cleo", [f"Say hello ({n})." for n in range(8)], until="refused")

    spec = RunSpec.define(
        id="acme.byo-anthropic/v1",
        agents={
            "cleo": byo(
                ("python", "agent.py"),
                files={"agent.py": ANTHROPIC_AGENT},
                packages=("anthropic>=0.40",),
                provider="local",
                token_budget=240,
            )
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    replies = outcome.exit.value
    assert replies[0].startswith("ok: "), replies
    assert replies[-1] == "refused: PermissionDeniedError 403", replies
    ledger = ledger_of(spec, outcome)
    usage = list(ledger.events(AgentModelUsage))
    assert usage and {u.agent for u in usage} == {"cleo"}
    assert len(usage) == sum(reply.startswith("ok: ") for reply in replies)
    reached = list(ledger.events(AgentModelBudgetReached))
    assert [r.agent for r in reached] == ["cleo"]
    assert sum(u.prompt_tokens + u.completion_tokens for u in usage) <= 240


STREAMING_AGENT = """
import anyio
from openai import OpenAI
from society_sandbox.network.client import connect_sandbox_agent

client = OpenAI()


def streamed(text: str) -> str:
    chunks = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": text}],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage = [], None
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    return f"{len(parts)} chunk(s), {usage.completion_tokens} tokens: {''.join(parts)}"


async def main() -> None:
    async with connect_sandbox_agent() as session:
        async for delivery in session.deliveries():
            said = await anyio.to_thread.run_sync(streamed, delivery.text)
            await session.send(delivery.conversation_id, said)


anyio.run(main)
"""


async def test_a_streamed_openai_sdk_call_is_answered_as_server_sent_events_and_metered(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> list[str]:
        return await ask(ctx, "sam", ["Say hello."])

    spec = RunSpec.define(
        id="acme.byo-stream/v1",
        agents={
            "sam": byo(
                ("python", "agent.py"), files={"agent.py": STREAMING_AGENT}, provider="local"
            )
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    (reply,) = outcome.exit.value
    (usage,) = ledger_of(spec, outcome).events(AgentModelUsage)
    assert usage.agent == "sam"
    assert reply.startswith(f"1 chunk(s), {usage.completion_tokens} tokens: "), reply
