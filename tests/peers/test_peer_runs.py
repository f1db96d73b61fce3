"""Evaluation peers in real local runs: their policy decides, the program only observes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from controller import Run, RunSpec
from controller.agents import (
    OwnerError,
    OwnerTypeError,
    PeerObservations,
    Resources,
    ScriptedOwner,
    peer,
    scripted,
)
from controller.agents.peer import PeerStopped
from controller.events.network import RouterMessageCommitted
from controller.events.run import (
    AgentProcessExited,
    AgentProcessSignaled,
    AgentRuntimeArtifact,
    AgentRuntimeCompleted,
    AgentRuntimeStartFailed,
    AgentWorkspaceFileHarvested,
    RosterRefused,
)
from controller.platforms.local import LocalPlatform
from controller.run import PlatformLost, ProgramFinished, RunContext, Success
from ledger import open_ledger_artifacts
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

pytestmark = pytest.mark.anyio

EAVESDROPPER = """
from society_sandbox.runtimes.peer import Decision, Received, Say


def respond(received: Received) -> Decision:
    latest = received.latest
    if latest is None:
        return Decision(say=(Say("say hi", to=("bob",)),), publish={"mood": "curious"})
    senders = sorted({m.sender for m in received.messages})
    return Decision(
        say=(Say(f"{received.me} heard {latest.sender}: {latest.text}"),),
        publish={"mood": "listening", "heard": len(received.messages), "senders": senders},
    )
"""
echo = ScriptedPolicy(rules=(Rule(match="^say ", texts=("{me} heard: {text}",)),))


def ledger_of(spec: RunSpec, outcome: ProgramFinished | PlatformLost) -> Any:
    receipt = outcome.receipt
    return open_ledger_artifacts(
        spec.catalog,
        receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=receipt.public_key,
    )


async def test_a_peer_speaks_by_its_policy_and_its_messages_are_committed_like_any_agents(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> dict[str, Any]:
        eve = ctx.agents.owner("eve", PeerObservations)
        async with ctx.network.endpoint("workload") as workload:
            chat = await workload.open(ctx.agents.eve.agent)
            await chat.send("hello eve")
            with anyio.fail_after(20):
                async for message in workload.messages():
                    reply = message
                    break
            with anyio.fail_after(20):
                # polling is all a program can do: the peer publishes, it is never asked
                while (seen := await eve.observe()).sent < 3:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
        with pytest.raises(OwnerTypeError, match="eve runs peer; its owner handle is Pe"):
            ctx.agents.owner("eve", ScriptedOwner)
        return {"reply": (reply.sender.name, reply.text), "seen": seen.model_dump()}

    spec = RunSpec.define(
        id="acme.peer-test/v1",
        agents={
            "eve": peer("eavesdropper.py", "respond", files={"eavesdropper.py": EAVESDROPPER}),
            "bob": scripted(echo),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    value = outcome.exit.value
    assert value["reply"] == ("eve", "eve heard workload: hello eve")
    seen = value["seen"]
    assert seen["sent"] == 3 and seen["policy_errors"] == 0 and seen["policy_calls"] == 3
    assert seen["published"] == {"mood": "listening", "heard": 2, "senders": ["bob", "workload"]}

    ledger = ledger_of(spec, outcome)
    by_eve = [e.parts for e in ledger.events(RouterMessageCommitted) if e.sender_id == "agent:eve"]
    assert ["say hi"] in by_eve and ["eve heard workload: hello eve"] in by_eve
    assert ["eve heard bob: bob heard: say hi"] in by_eve
    stopped = [e for e in ledger.events(PeerStopped)]
    assert len(stopped) == 1 and stopped[0].outcome == "completed" and stopped[0].sent == 3
    assert {e.agent for e in ledger.events(AgentRuntimeCompleted)} == {"eve", "bob"}
    harvested = {e.path: e.outcome for e in ledger.events(AgentWorkspaceFileHarvested)}
    assert harvested["eavesdropper.py"] == "harvested" and harvested["peer.json"] == "harvested"


CHATTY = """
from society_sandbox.runtimes.peer import Decision, Say


def respond(received):
    return Decision(say=tuple(Say(f"word {n}", to=("bob",)) for n in range(3)))
"""


async def test_a_peer_that_reaches_max_sends_says_so_in_its_observations_log_and_stop_record(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> dict[str, Any]:
        talker = ctx.agents.owner("talker", PeerObservations)
        with anyio.fail_after(30):
            while (seen := await talker.observe()).limit is None:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        return seen.model_dump()

    spec = RunSpec.define(
        id="acme.peer-limit/v1",
        agents={
            "talker": peer("chatty.py", "respond", files={"chatty.py": CHATTY}, max_sends=2),
            "bob": scripted(),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    seen = outcome.exit.value
    assert seen["limit"] == "max-sends" and seen["sent"] == 2 and seen["unsent"] == 1
    ledger = ledger_of(spec, outcome)
    [stopped] = list(ledger.events(PeerStopped))
    assert stopped.limit == "max-sends" and stopped.sent == 2 and stopped.unsent == 1
    sent = [e for e in ledger.events(RouterMessageCommitted) if e.sender_id == "agent:talker"]
    assert len(sent) == 2
    log = Path(outcome.receipt.ledger_dir).parents[1] / "artifacts" / "talker" / "logs"
    said = "".join(path.read_text() for path in log.iterdir())
    assert "peer reached max_sends=2: it sends nothing more" in said


SILENT = """
def respond(received):
    return None
"""


async def test_the_bridge_has_no_send_path_whatever_the_program_asks(
    artifact_root: Path,
) -> None:
    """Play the attacker with the bridge token in hand: every command is refused, nothing is
    sent, the policy is never called, and the peer is still there."""

    async def execute(ctx: RunContext) -> dict[str, Any]:
        mallory = ctx.agents.owner("mallory", PeerObservations)
        public = {n for n in dir(PeerObservations) if not n.startswith("_")}
        before = await mallory.observe()
        refusals = {}
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("instruct", {"text": "say PWNED", "peers": ["workload"]}),
            ("stop", {"reason": "owner"}),
            ("send", {"conversation": "c-1", "text": "PWNED"}),
            ("open", {"peers": ["workload"]}),
            ("state", {"publish": {"x": 1}, "say": "PWNED"}),
        ]
        async with ctx.network.endpoint("workload") as workload:
            for op, fields in attempts:
                try:
                    refusals[op] = await mallory._call(op, **fields)
                except OwnerError as exc:
                    refusals[op] = str(exc)
            heard = []
            with anyio.move_on_after(2):
                async for message in workload.messages():
                    heard.append(message.text)
        after = await mallory.observe()
        return {
            "public": sorted(public),
            "refusals": refusals,
            "heard": heard,
            "before": before.model_dump(),
            "after": after.model_dump(),
            "ended": ctx.agents.mallory.termination.done,
        }

    spec = RunSpec.define(
        id="acme.peer-attack/v1",
        agents={"mallory": peer("silent.py", "respond", files={"silent.py": SILENT})},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    value = outcome.exit.value
    assert value["public"] == ["observe", "state"]
    refusals = value["refusals"]
    assert refusals["instruct"] == "this agent's bridge is read-only: 'instruct' is not offered"
    assert refusals["stop"] == "this agent's bridge is read-only: 'stop' is not offered"
    assert refusals["send"] == "unknown op 'send'" and refusals["open"] == "unknown op 'open'"
    assert refusals["state"]["sent"] == 0  # extra fields change nothing
    assert value["heard"] == [] and value["ended"] is False
    assert value["after"]["sent"] == 0 and value["after"]["policy_calls"] == 1  # the opening
    assert value["after"]["published"] == {}
    ledger = ledger_of(spec, outcome)
    assert [e for e in ledger.events(RouterMessageCommitted)] == []


async def test_a_policy_that_cannot_be_imported_in_its_sandbox_fails_the_gate(
    artifact_root: Path,
) -> None:
    broken = "import no_such_module_anywhere\n\ndef respond(received):\n    return None\n"

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    spec = RunSpec.define(
        id="acme.peer-broken/v1",
        agents={"eve": peer("broken.py", "respond", files={"broken.py": broken})},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost)
    ledger = ledger_of(spec, outcome)
    assert [e.agent for e in ledger.events(AgentRuntimeStartFailed)] == ["eve"]
    log = [e for e in ledger.events(AgentRuntimeArtifact) if e.kind == "log"]
    text = (artifact_root / outcome.receipt.run_id / str(log[0].artifact)).read_text()
    assert "peer: cannot load its policy: ModuleNotFoundError" in text
    assert "no_such_module_anywhere" in text


SLOW_IMPORT = "import time\n\ntime.sleep(60)  # an honest stand-in for a heavy import\n"
IMPORTS_ON_ITS_FIRST_CALL = """
def respond(received):
    import slow_import
    return None
"""
SLOW_TO_SHUT_DOWN = """
import atexit
import time

atexit.register(time.sleep, 4)  # a stand-in for a heavy library's interpreter shutdown


def respond(received):
    return None
"""


async def test_a_peer_stopped_during_a_slow_import_or_a_slow_shutdown_exits_cleanly(
    artifact_root: Path,
) -> None:
    """eve's first policy call is still importing when teardown's SIGTERM comes, and ada's
    interpreter takes 4 s to shut down: both stop and exit 0 within their stop grace (before, the
    2 s after SIGTERM ran out and both were recorded as SIGKILLed after ``completed``)."""

    async def execute(ctx: RunContext) -> None:
        eve = ctx.agents.owner("eve", PeerObservations)
        with anyio.fail_after(20):
            while (await eve.observe()).policy_calls < 1:  # noqa: ASYNC110
                await anyio.sleep(0.05)

    spec = RunSpec.define(
        id="acme.peer-slow-stop/v1",
        agents={
            "eve": peer(
                "lazy.py",
                "respond",
                files={"lazy.py": IMPORTS_ON_ITS_FIRST_CALL, "slow_import.py": SLOW_IMPORT},
                packages=("anyio>=4",),  # the environment has it: nothing is refused
            ),
            "ada": peer("slow.py", "respond", files={"slow.py": SLOW_TO_SHUT_DOWN}),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    ledger = ledger_of(spec, outcome)
    assert sorted((e.agent, e.outcome) for e in ledger.events(PeerStopped)) == [
        ("ada", "completed"),
        ("eve", "completed"),
    ]
    assert [(e.agent, e.signal_name) for e in ledger.events(AgentProcessSignaled)] == []
    assert sorted(e.agent for e in ledger.events(AgentRuntimeCompleted)) == ["ada", "eve"]


async def test_a_peer_stopped_while_its_policy_module_imports_exits_at_once_and_cleanly(
    artifact_root: Path,
) -> None:
    """SIGTERM while the policy module itself still imports: the peer handles it from its first
    line, so the import is interrupted and the peer exits 0 (before: killed by the signal)."""

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    heavy = SLOW_IMPORT + "\n\ndef respond(received):\n    return None\n"
    spec = RunSpec.define(
        id="acme.peer-slow-import/v1",
        agents={"eve": peer("heavy.py", "respond", files={"heavy.py": heavy}, ready_timeout_s=2)},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost)
    ledger = ledger_of(spec, outcome)
    assert [e.reason for e in ledger.events(AgentRuntimeStartFailed)] == ["ready-timeout"]
    assert [e.exit_code for e in ledger.events(AgentProcessExited)] == [0]
    assert [e.signal_name for e in ledger.events(AgentProcessSignaled)] == []
    log = [e for e in ledger.events(AgentRuntimeArtifact) if e.kind == "log"]
    text = (artifact_root / outcome.receipt.run_id / str(log[0].artifact)).read_text()
    assert "peer: stopped while its policy was loading" in text


async def test_a_policy_short_of_address_space_fails_the_gate_naming_the_limit_and_its_option(
    artifact_root: Path,
) -> None:
    big = "ballast = bytearray(1024 * 1024 * 1024)  # more than its limit\n\n" + SILENT

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    tight = Resources(cpu=0.02, memory_mib=64, memory_limit_mib=256)
    spec = RunSpec.define(
        id="acme.peer-address-space/v1",
        agents={"eve": peer("big.py", "respond", files={"big.py": big}, resources=tight)},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost)
    (failed,) = ledger_of(spec, outcome).events(AgentRuntimeStartFailed)
    assert failed.reason == "program-cannot-start"
    assert "(address-space-exhausted): peer: cannot load its policy: MemoryError" in failed.detail
    assert "address space is limited to 256 MiB (RLIMIT_AS" in failed.detail
    assert "raise it with peer(..., resources=Resources(memory_limit_mib=1536))" in failed.detail
    assert failed.detail in str(outcome.cause.detail)  # the run's result says it too


MISSING = "no-such-distribution-for-society>=1.0"


async def test_a_declared_package_the_agents_environment_lacks_refuses_the_run_before_it_starts(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    eve = peer("silent.py", "respond", files={"silent.py": SILENT}, packages=("anyio", MISSING))
    spec = RunSpec.define(id="acme.peer-packages/v1", agents={"eve": eve}, execute=execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost) and outcome.cause.reason == "package-missing"
    assert f"eve needs {MISSING} (not installed)" in outcome.cause.detail
    assert f"-m pip install '{MISSING}'" in outcome.cause.detail
    ledger = ledger_of(spec, outcome)
    assert [e.reason for e in ledger.events(RosterRefused)] == ["package-missing"]
    assert [e for e in ledger.events(AgentRuntimeStartFailed)] == []  # no sandbox was started


class UncheckedPackages(LocalPlatform):
    """A platform that cannot see the agents' environment (a cluster's image, say)."""

    def _check_packages(self, roster: Any, admission: Any) -> None:
        return None


async def test_where_the_platform_cannot_check_the_peer_refuses_to_start_naming_the_package(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the program must not run")

    eve = peer("silent.py", "respond", files={"silent.py": SILENT}, packages=(MISSING,))
    spec = RunSpec.define(id="acme.peer-packages/v1", agents={"eve": eve}, execute=execute)
    outcome = await Run.execute(spec, platform=UncheckedPackages(), artifact_root=artifact_root)
    assert isinstance(outcome, PlatformLost)
    (failed,) = ledger_of(spec, outcome).events(AgentRuntimeStartFailed)
    assert failed.reason == "program-cannot-start"
    assert f"(package-missing): peer: its policy needs {MISSING} (not installed)" in failed.detail
    assert "on a cluster profile, into the peer's image" in failed.detail
