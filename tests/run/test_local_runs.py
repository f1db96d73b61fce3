"""Whole runs on the local profile, with real agent processes and a real router."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from run_support import (
    agent_pid,
    ledger_bytes,
    only,
    processes_of,
    program_environ,
    tags,
    verified,
    with_command,
)

from controller import Event, EventCatalog, Run, RunSpec
from controller.agents import Completed, Harvest, SecretRef, Signaled, scripted
from controller.events.network import RouterMessageCommitted
from controller.events.run import (
    AgentProcessSignaled,
    AgentRuntimeArtifact,
    AgentRuntimeCompleted,
    AgentRuntimeReady,
    AgentRuntimeStartFailed,
    AgentWorkspaceFileHarvested,
    PlatformFailed,
    ProgramFailed,
    ProgramInterrupted,
    ReadinessGateFailed,
    RosterRefused,
)
from controller.platforms.local import LocalCapacity, LocalPlatform
from controller.run import (
    Failure,
    PlatformLost,
    ProgramFinished,
    RunContext,
    RunSpecError,
    Success,
)
from ledger import open_ledger_artifacts
from society_sandbox.runtimes.scripted import OWNER, Opening, ReplyDelay, Rule, ScriptedPolicy

pytestmark = pytest.mark.anyio


class Agreed(Event):
    tag: ClassVar[str] = "acme.agreed/v1"

    offer: str


class Undeclared(Event):
    tag: ClassVar[str] = "acme.undeclared/v1"


echo = ScriptedPolicy(rules=(Rule(match="^say ", texts=("{me} heard: {text}",)),))


def spec_of(execute: Any, **agents: Any) -> RunSpec:
    return RunSpec.define(
        id="acme.kernel-test/v1",
        events=[EventCatalog.make(Agreed)],
        agents=agents or {"alice": scripted(echo), "bob": scripted(echo)},
        execute=execute,
    )


async def test_a_run_succeeds_and_its_ledger_verifies(artifact_root: Path) -> None:
    async def execute(ctx: RunContext) -> str:
        assert sorted(ctx.agents) == ["alice", "bob"]
        async with ctx.network.endpoint("workload") as workload:
            chat = await workload.open(ctx.agents.alice.agent, ctx.agents["bob"].agent)
            await chat.send("say hello")
            heard = set()
            with anyio.fail_after(15):
                async for message in workload.messages():
                    heard.add(message.text)
                    if len(heard) == 2:
                        break
        await ctx.events.emit(Agreed(offer="hello"), correlation_id=chat.conversation_id)
        return " | ".join(sorted(heard))

    spec = spec_of(execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=3)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    assert outcome.exit.value == "alice heard: say hello | bob heard: say hello"
    ledger = verified(spec, outcome)
    sequence = tags(ledger)
    assert sequence[:4] == [
        "society.run-started/v1",
        "society.agent-isolation/v1",
        "society.router-started/v1",
        "society.roster-admitted/v1",
    ]
    gate = sequence.index("society.readiness-gate-passed/v1")
    assert sequence.count("society.agent-runtime-ready/v1") == 2
    assert max(i for i, t in enumerate(sequence) if t == "society.agent-runtime-ready/v1") < gate
    assert sequence.index("society.endpoint-opened/v1") > gate
    assert sequence.count("society.program-succeeded/v2") == 1
    assert {e.agent for e in ledger.events(AgentRuntimeCompleted)} == {"alice", "bob"}
    assert {e.phase for e in ledger.events(AgentRuntimeCompleted)} == {"teardown"}
    agreed = only(ledger.records_of(Agreed))
    assert agreed.producer == "program" and agreed.envelope.correlation_id == "c-1"
    assert ledger.metadata["seed"] == 3 and ledger.metadata["profile"] == "local"
    assert processes_of(ledger.run_id) == []
    assert not (artifact_root / ledger.run_id / "sandboxes").exists()


async def test_a_failing_program_finishes_with_a_failure_exit_and_a_complete_receipt(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise ValueError("the experiment broke")

    spec = spec_of(execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Failure)
    assert isinstance(outcome.exit.error, ValueError)
    failed = only(verified(spec, outcome).events(ProgramFailed))
    assert failed.error_type == "ValueError" and "the experiment broke" in failed.detail


def test_a_program_naming_an_undeclared_event_is_refused_when_the_spec_is_defined() -> None:
    async def execute(ctx: RunContext) -> None:
        await ctx.events.emit(Undeclared())

    with pytest.raises(RunSpecError) as refused:
        spec_of(execute)
    assert refused.value.reason == "undeclared-event"
    assert "execute names Undeclared (acme.undeclared/v1)" in str(refused.value)
    assert "RunSpec.define(events=[..., Undeclared])" in str(refused.value)


EMITTED_LATER = {"undeclared": Undeclared}
"""Reached only at run time: no check at definition can see which class the program emits."""


async def test_emitting_an_undeclared_event_fails_the_program_with_a_clear_error(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        await ctx.events.emit(EMITTED_LATER["undeclared"]())

    spec = spec_of(execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Failure)
    assert outcome.exit.reason == "undeclared-event"
    assert "list its catalog in RunSpec.define(events=[...])" in outcome.exit.detail
    assert only(verified(spec, outcome).events(ProgramFailed)).reason == "undeclared-event"


async def test_an_agent_killed_mid_run_is_evidence_and_the_program_goes_on(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> str:
        os.kill(agent_pid(artifact_root, ctx.ledger.run_id, "bob"), signal.SIGKILL)
        with anyio.fail_after(10):
            ended = await ctx.agents.bob.termination
        assert ended == Signaled(signal.SIGKILL)
        async with ctx.network.endpoint("workload") as workload:
            chat = await workload.open(ctx.agents.alice.agent)
            await chat.send("say still here")
            with anyio.fail_after(15):
                async for message in workload.messages():
                    return message.text
        return "nothing"

    spec = spec_of(execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and outcome.exit == Success(
        "alice heard: say still here"
    )
    ledger = verified(spec, outcome)
    signaled = only(ledger.events(AgentProcessSignaled))
    assert (signaled.agent, signaled.signal, signaled.signal_name, signaled.phase) == (
        "bob",
        9,
        "SIGKILL",
        "program",
    )
    assert [e.agent for e in ledger.events(AgentRuntimeCompleted)] == ["alice"]


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (("python", "-c", "import time; time.sleep(60)"), "ready-timeout"),
        (("python", "-c", "raise SystemExit(3)"), "exited-before-ready"),
        (("/nonexistent/agent-binary",), None),
    ],
)
async def test_an_agent_that_never_becomes_ready_fails_the_gate_and_nothing_runs(
    artifact_root: Path, command: tuple[str, ...], reason: str | None
) -> None:
    ran = False

    async def execute(ctx: RunContext) -> None:
        nonlocal ran
        ran = True

    broken = with_command(scripted(echo), *command, ready_timeout_s=3.0)
    spec = spec_of(execute, alice=scripted(echo), bob=broken)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "readiness-gate-failed"
    assert not ran
    ledger = verified(spec, outcome)
    failed = only(ledger.events(AgentRuntimeStartFailed))
    assert failed.agent == "bob"
    if reason is not None:
        assert failed.reason == reason
    gate = only(ledger.events(ReadinessGateFailed))
    assert "bob" in gate.failed
    assert "society.readiness-gate-passed/v1" not in tags(ledger)
    assert "society.program-succeeded/v2" not in tags(ledger)
    assert processes_of(ledger.run_id) == []


async def test_a_roster_over_the_local_budget_is_refused_before_any_agent_starts(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise AssertionError("never dispatched")

    spec = spec_of(execute)
    platform = LocalPlatform(LocalCapacity(cpu=0.03, memory_mib=100_000, agents=10))
    outcome = await Run.execute(spec, platform=platform, artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "insufficient-cpu"
    refused = only(verified(spec, outcome).events(RosterRefused))
    assert refused.requested.cpu == pytest.approx(0.04) and refused.capacity.cpu == 0.03
    assert "society.agent-runtime-ready/v1" not in tags(verified(spec, outcome))
    assert not (artifact_root / outcome.receipt.run_id / "sandboxes").exists()


async def test_a_platform_error_inside_a_task_group_is_reported_by_its_own_type_and_reason(
    artifact_root: Path,
) -> None:
    class NodeGone(Exception):
        reason = "node-gone"

    class FailingPlatform(LocalPlatform):
        def admit(self, agents: Any) -> Any:
            raise ExceptionGroup("unhandled errors in a TaskGroup", [NodeGone("node-1 left")])

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("never dispatched")

    spec = spec_of(execute)
    outcome = await Run.execute(spec, platform=FailingPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "node-gone"
    failed = only(verified(spec, outcome).events(PlatformFailed))
    assert failed.detail == "NodeGone: node-1 left" and failed.reason == "node-gone"


async def test_the_gateway_instructs_reports_and_stops_its_agent(artifact_root: Path) -> None:
    greeter = ScriptedPolicy(
        rules=(Rule(match="^greet$", senders=(OWNER,), texts=("hi {sender}",), peers=("bob",)),)
    )

    async def execute(ctx: RunContext) -> dict[str, Any]:
        alice = ctx.agents.alice
        await alice.owner.instruct("greet")
        with anyio.fail_after(15):
            async for committed in ctx.ledger.events(RouterMessageCommitted):
                if committed.sender_id == "agent:alice":
                    break
        state = await alice.owner.state()
        await alice.owner.stop()
        with anyio.fail_after(10):
            assert await alice.termination == Completed()
        return state

    spec = spec_of(execute, alice=scripted(greeter), bob=scripted(echo))
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    state = outcome.exit.value
    assert state["name"] == "alice" and state["authenticated"] and state["sent"] == 1
    assert state["instructions"] == 1
    ledger = verified(spec, outcome)
    assert only(ledger.events(RouterMessageCommitted)).parts == ["hi owner"]
    phases = {e.agent: e.phase for e in ledger.events(AgentRuntimeCompleted)}
    assert phases == {"alice": "program", "bob": "teardown"}


async def test_declared_files_and_logs_are_harvested_by_digest_with_explicit_outcomes(
    artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SR_TEST_API_KEY", "sk-not-for-the-ledger-123")
    monkeypatch.setenv("SOCIETY_CREDENTIALS", "SR_TEST_API_KEY")  # the operator allows it
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> None:
        run_dir = artifact_root / ctx.ledger.run_id
        secrets_file = run_dir / "sandboxes" / "alice" / "work" / ".society" / "secrets.json"
        seen["mode"] = stat.S_IMODE((await anyio.Path(secrets_file).stat()).st_mode)
        seen["secrets"] = json.loads(await anyio.Path(secrets_file).read_text())
        pid = agent_pid(artifact_root, ctx.ledger.run_id, "alice")
        seen["environ"] = program_environ(pid)

    harvest = Harvest(
        files=("policy.json", "notes/big.txt", "missing.txt", "subdir"), max_bytes=1000
    )
    alice = scripted(
        echo,
        files={"notes/big.txt": "x" * 2000, "subdir/inner.txt": "y"},
        environment={"GREETING": "hello"},
        credentials={"API_KEY": SecretRef(env="SR_TEST_API_KEY")},
        harvest=harvest,
    )
    spec = spec_of(execute, alice=alice)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    ledger = verified(spec, outcome)
    run_dir = artifact_root / ledger.run_id

    files = {e.path: e for e in ledger.events(AgentWorkspaceFileHarvested)}
    assert {path: e.outcome for path, e in files.items()} == {
        "policy.json": "harvested",
        "notes/big.txt": "oversize",
        "missing.txt": "absent",
        "subdir": "unreadable",
    }
    policy = files["policy.json"]
    copy = run_dir / str(policy.artifact)
    assert copy.read_bytes() == alice.files["policy.json"]
    declared = {f.path: f.sha256 for f in only(ledger.events(AgentRuntimeReady)).files}
    assert policy.sha256 == declared["policy.json"]
    assert files["notes/big.txt"].size == 2000 and files["notes/big.txt"].artifact is None
    log = only(ledger.events(AgentRuntimeArtifact))
    assert (
        log.kind == "log" and log.outcome == "harvested" and (run_dir / str(log.artifact)).is_file()
    )

    assert seen["mode"] == 0o600
    assert seen["secrets"]["credentials"] == {"API_KEY": "sk-not-for-the-ledger-123"}
    environ = dict(item.split(b"=", 1) for item in seen["environ"].split(b"\0") if b"=" in item)
    assert environ[b"GREETING"] == b"hello" and environ[b"SOCIETY_AGENT_NAME"] == b"alice"
    assert b"sk-not-for-the-ledger-123" not in seen["environ"]
    assert seen["secrets"]["routerToken"].encode() not in seen["environ"]
    assert not any(k.startswith(b"PYTEST") or k == b"SR_TEST_API_KEY" for k in environ)
    evidence = ledger_bytes(outcome)
    assert b"sk-not-for-the-ledger-123" not in evidence
    assert seen["secrets"]["routerToken"].encode() not in evidence
    assert seen["secrets"]["bridgeToken"].encode() not in evidence
    ready = only(ledger.events(AgentRuntimeReady))
    assert ready.credentials == ["API_KEY"] and ready.environment == ["GREETING"]
    assert not (run_dir / "sandboxes").exists()


async def test_a_missing_credential_fails_the_agents_start(
    artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SR_TEST_ABSENT_KEY", raising=False)
    monkeypatch.setenv("SOCIETY_CREDENTIALS", "SR_TEST_ABSENT_KEY")  # allowed, but not set

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("never dispatched")

    alice = scripted(echo, credentials={"KEY": SecretRef(env="SR_TEST_ABSENT_KEY")})
    spec = spec_of(execute, alice=alice)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost)
    assert (
        only(verified(spec, outcome).events(AgentRuntimeStartFailed)).reason == "credential-missing"
    )


async def test_cancellation_finalizes_the_run_and_stays_a_cancellation(
    artifact_root: Path,
) -> None:
    running = anyio.Event()

    async def execute(ctx: RunContext) -> None:
        running.set()
        await anyio.sleep_forever()

    spec = spec_of(execute)
    run_ids: list[str] = []
    finished = False
    async with anyio.create_task_group() as tasks:

        async def run() -> None:
            nonlocal finished
            await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
            finished = True

        tasks.start_soon(run)
        with anyio.fail_after(30):
            await running.wait()
        run_ids.extend([path.name async for path in anyio.Path(artifact_root).iterdir()])
        tasks.cancel_scope.cancel()
    assert not finished
    (run_id,) = run_ids
    ledger_dir = artifact_root / run_id / "ledger" / "main"
    assert (ledger_dir / "completion.json").is_file()
    ledger = open_ledger_artifacts(spec.catalog, ledger_dir, expected_definition_id=spec.id)
    interrupted = only(ledger.events(ProgramInterrupted))
    assert interrupted.dispatched and interrupted.reason == "cancelled"
    assert tags(ledger).index("society.program-interrupted/v1") < tags(ledger).index(
        "society.agent-runtime-completed/v1"
    )
    assert processes_of(run_id) == []


def turn_taking() -> dict[str, Any]:
    words = tuple(f"w{i}" for i in range(50))
    ann = ScriptedPolicy(
        openings=(Opening(peers=("ben",), text="serve"),),
        rules=(Rule(senders=("ben",), texts=tuple(f"ann {w} {{count}}" for w in words)),),
        delay=ReplyDelay(min_ms=0, max_ms=15),
        max_sends=8,
    )
    ben = ScriptedPolicy(
        rules=(Rule(senders=("ann",), texts=tuple(f"ben {w}" for w in words)),),
        delay=ReplyDelay(min_ms=0, max_ms=15),
        max_sends=8,
    )
    return {"ann": scripted(ann), "ben": scripted(ben)}


async def test_a_turn_taking_society_repeats_its_conversations_under_the_same_seed(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        seen = 0
        with anyio.fail_after(30):
            async for _ in ctx.ledger.events(RouterMessageCommitted):
                seen += 1
                if seen == 16:
                    return

    spec = RunSpec.define(id="acme.turns/v1", agents=turn_taking(), execute=execute)

    async def conversations(seed: int) -> dict[str, list[tuple[str, list[str]]]]:
        outcome = await Run.execute(
            spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=seed
        )
        assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
        by_conversation: dict[str, list[tuple[str, list[str]]]] = {}
        for message in verified(spec, outcome).events(RouterMessageCommitted):
            by_conversation.setdefault(message.conversation_id, []).append(
                (message.sender_id, message.parts)
            )
        return by_conversation

    first = await conversations(seed=42)
    assert len(first["c-1"]) == 16 and first["c-1"][0] == ("agent:ann", ["serve"])
    assert await conversations(seed=42) == first
    assert await conversations(seed=43) != first


async def test_a_native_task_cancel_finalizes_the_run_too(artifact_root: Path) -> None:
    """Temporal cancels an activity with ``Task.cancel()``, not through an anyio scope."""
    running = anyio.Event()

    async def execute(ctx: RunContext) -> None:
        running.set()
        await anyio.sleep_forever()

    spec = spec_of(execute)
    task = asyncio.get_running_loop().create_task(
        Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    )
    with anyio.fail_after(30):
        await running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (run_dir,) = [path async for path in anyio.Path(artifact_root).iterdir()]
    ledger = open_ledger_artifacts(spec.catalog, Path(run_dir) / "ledger" / "main")
    assert only(ledger.events(ProgramInterrupted)).reason == "cancelled"
    assert "society.agent-runtime-completed/v1" in tags(ledger)
    assert processes_of(ledger.run_id) == []
