"""What a module hands over as data never steers a process outside a sandbox: each test plays the
module author who tries it, and is refused.

A descriptor's environment reaches only the agent's program inside its sandbox (the host-side
launcher and bwrap run with a fixed environment the controller builds), it may not name a variable
that makes a loader or an interpreter run other code, a roster may not name the model gateway the
run's services grant, and an agent cannot hold a finished run open for long.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from controller import Run, RunSpec
from controller.agents import SecretRef, scripted
from controller.agents.llm import llm
from controller.agents.runtime import MAX_TERM_GRACE_S, RuntimeDescriptorError
from controller.modelgateway.config import ProviderConfig, named_provider
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, RunContext, RunSpecError, Success, new_run_id
from controller.run.handover import HandoverRefused
from controller.run.spec import load_run_spec
from controller.settings import RUN_ID

pytestmark = pytest.mark.anyio

NEEDLE = "MODULE_CHOSE_THIS"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("LD_PRELOAD", "loader-variable"),
        ("LD_LIBRARY_PATH", "loader-variable"),
        ("ld_audit", "loader-variable"),
        ("GCONV_PATH", "loader-variable"),
        ("MALLOC_CHECK_", "loader-variable"),
        ("PYTHONSTARTUP", "loader-variable"),
        ("PYTHONPATH", "loader-variable"),
        ("BASH_ENV", "loader-variable"),
        ("NODE_OPTIONS", "loader-variable"),
        ("SOCIETY_RUN_ID", "reserved-variable"),
        ("X=Y", "bad-variable"),
        ("", "bad-variable"),
    ],
)
def test_a_descriptor_naming_a_loader_or_reserved_variable_is_refused(
    name: str, reason: str
) -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        scripted(environment={name: "/home/agent/evil.so"})
    assert refused.value.reason == reason


def test_a_value_with_a_nul_byte_is_refused() -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        scripted(environment={"GREETING": "hello\x00LD_PRELOAD=/x.so"})
    assert refused.value.reason == "bad-variable"


@pytest.mark.parametrize("name", ["MODEL_GATEWAY_URL", "MODEL_GATEWAY_SOCKET", "MODEL_NAME"])
def test_a_roster_cannot_name_what_the_runs_services_grant(name: str) -> None:
    async def execute(ctx: RunContext) -> None:
        return None

    with pytest.raises(RunSpecError) as refused:
        RunSpec.define(
            id="acme.relay-elsewhere/v1",
            agents={"eve": scripted(environment={name: "http://127.0.0.1:7233"})},
            execute=execute,
        )
    assert refused.value.reason == "service-variable"


def test_an_agent_cannot_ask_for_an_unbounded_grace_after_sigterm() -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        dataclasses.replace(scripted(), term_grace_s=1e6)
    assert refused.value.reason == "bad-option"
    assert dataclasses.replace(scripted(), term_grace_s=MAX_TERM_GRACE_S).term_grace_s == 300


def _run_processes(run_id: str) -> dict[str, list[bytes]]:
    """The environment of every process of the run, by where it runs: ``host`` (this process's
    PID namespace) or ``sandbox`` (an agent's own)."""
    mine = os.readlink("/proc/self/ns/pid")
    mark = f"{RUN_ID.name}={run_id}".encode()
    found: dict[str, list[bytes]] = {"host": [], "sandbox": []}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes()
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:  # gone, or not ours to read
            continue
        if mark in environment.split(b"\0"):
            found["host" if namespace == mine else "sandbox"].append(environment)
    return found


async def test_host_side_processes_never_run_with_a_descriptors_environment(
    artifact_root: Path,
) -> None:
    run_id = new_run_id()
    planted = f"{NEEDLE}=/home/agent/payload".encode()
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> None:
        found = _run_processes(run_id)
        seen["host"] = [planted in env.split(b"\0") for env in found["host"]]
        seen["sandbox"] = [planted in env.split(b"\0") for env in found["sandbox"]]

    spec = RunSpec.define(
        id="acme.host-environment/v1",
        agents={"eve": scripted(environment={NEEDLE: "/home/agent/payload"})},
        execute=execute,
    )
    outcome = await Run.execute(
        spec, platform=LocalPlatform(), artifact_root=artifact_root, run_id=run_id
    )
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    # bwrap and the launchers before it run on the host, with none of the descriptor's variables
    assert seen["host"] and not any(seen["host"]), seen
    # the agent's program, inside its sandbox, has them
    assert any(seen["sandbox"]), seen


def test_a_module_cannot_declare_a_shipped_runtimes_event_as_its_own() -> None:
    from typing import ClassVar

    from controller import Event, EventCatalog
    from controller.modelgateway.events import AgentModelUsage
    from ledger import CatalogError

    class ForgedUsage(Event):
        tag: ClassVar[str] = AgentModelUsage.tag
        agent: str
        cost_usd: float

    async def execute(ctx: RunContext) -> None:
        return None

    for forged in (AgentModelUsage, ForgedUsage):
        with pytest.raises(CatalogError) as refused:
            RunSpec.define(
                id="acme.forger/v1",
                agents={"sam": scripted()},
                events=[EventCatalog.make(forged)],
                execute=execute,
            )
        assert refused.value.reason == "reserved-event-namespace"


async def test_the_ledger_records_the_parameters_the_operator_set_not_the_modules_answer(
    artifact_root: Path,
) -> None:
    from pydantic import BaseModel, ConfigDict, field_validator
    from run_support import verified

    from controller.events.run import RunStarted

    class Arm(BaseModel):
        model_config = ConfigDict(extra="forbid")
        treatment: str = "placebo"
        dose: int = 1

        @field_validator("treatment")
        @classmethod
        def _always_placebo(cls, value: str) -> str:
            return "placebo"  # the module's answer, whatever the operator set

    async def execute(ctx: RunContext) -> None:
        return None

    spec = RunSpec.define(
        id="acme.trial/v1", agents={"sam": scripted()}, execute=execute, parameters=Arm
    )
    outcome = await Run.execute(
        spec,
        platform=LocalPlatform(),
        artifact_root=artifact_root,
        parameters={"treatment": "drug"},
    )
    assert isinstance(outcome, ProgramFinished), outcome
    (started,) = list(verified(spec, outcome).events(RunStarted))
    assert started.parameters == {"treatment": "drug", "dose": 1}


HOSTILE_OUTPUT = """\
from controller import RunSpec, scripted

async def execute(ctx):
    raise RuntimeError(
        "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mred"
        + chr(10) + '{"outcome": "ProgramFinished", "exit": "success", "runId": "sr-forged"}'
    )

run_spec = RunSpec.define(id="acme.hostile-output/v1", agents={"sam": scripted()}, execute=execute)
"""


def test_a_programs_words_reach_the_terminal_escaped_and_never_as_a_result_line(
    tmp_path: Path,
) -> None:
    import json
    import subprocess
    import sys

    module = tmp_path / "hostile_output.py"
    module.write_text(HOSTILE_OUTPUT)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from controller.cli import main; sys.exit(main())",
            "run",
            str(module),
            "--artifacts",
            str(tmp_path / "artifacts"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["exit"] == "failure"
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert not [row for row in done.stderr.splitlines() if row.startswith('{"outcome"')]
    assert "\\x1b]0;pwned" in done.stderr  # shown, as an escape


FOLDER_PROBE = """\
from pathlib import Path
from controller import RunSpec, scripted

HERE = Path(__file__).resolve().parent

async def execute(ctx):
    if (HERE / "notes.txt").read_text() != "mine":  # its own folder: it reads it
        raise RuntimeError("the module could not read its own folder")
    runs = sorted(p.name for p in (HERE / "artifacts").iterdir())
    key = (HERE / "operator.pem").read_bytes()
    if runs or key:
        raise RuntimeError(f"the module read the controller's files: {runs} {key[:16]!r}")

run_spec = RunSpec.define(id="acme.folder-probe/v1", agents={"sam": scripted()}, execute=execute)
"""
MAKE_KEY = """
import os, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
pem = Ed25519PrivateKey.generate().private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, pem)
"""


SOCIETY = (sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())")


def _run_module(tmp_path: Path, name: str, source: str) -> tuple[Path, Any]:
    """``society run`` of ``source`` written as ``name`` under ``tmp_path``: its path and the
    finished process."""
    module = tmp_path / name
    module.write_text(source)
    root = str(tmp_path / "artifacts")
    return module, _society("run", str(module), "--artifacts", root, env=dict(os.environ))


def _ledger_of(module: Path, done: Any) -> Any:
    """The ledger the run's result line names, read with the module's catalog."""
    import json

    from ledger import open_ledger_artifacts

    ledger_dir = Path(json.loads(done.stdout)["ledger"])
    return open_ledger_artifacts(load_run_spec(module).catalog, ledger_dir)


def _society(*args: str, env: dict[str, str]) -> Any:
    import subprocess

    return subprocess.run(
        [*SOCIETY, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A project folder as a researcher keeps one: the module, its notes, the artifact root with
    an earlier run in it, and the operator's key beside them."""
    import subprocess
    import sys

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "probe.py").write_text(FOLDER_PROBE)
    earlier = tmp_path / "artifacts" / ("sr-" + "1" * 32)
    earlier.mkdir(parents=True)
    (earlier / "result.json").write_text("{}")
    key = tmp_path / "operator.pem"
    subprocess.run([sys.executable, "-c", MAKE_KEY, str(key)], check=True)
    return tmp_path, {**os.environ, "SOCIETY_SIGNING_KEY": str(key)}


def test_the_module_reads_its_folder_but_not_the_artifact_root_or_the_key_inside_it(
    project: tuple[Path, dict[str, str]],
) -> None:
    folder, env = project
    done = _society(
        "run", str(folder / "probe.py"), "--artifacts", str(folder / "artifacts"), env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_writable_folder_holding_the_artifact_root_is_refused(
    project: tuple[Path, dict[str, str]],
) -> None:
    folder, env = project
    done = _society(
        "run",
        str(folder / "probe.py"),
        "--artifacts",
        str(folder / "artifacts"),
        "--writable",
        str(folder),
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "folder-holds-controller-files" in done.stderr or "may not write" in done.stderr
    assert done.stdout == ""


FORK_BOMB = """\
import os, time
from controller import RunSpec, scripted

async def execute(ctx):
    held = []
    try:
        for _ in range(600):
            pid = os.fork()
            if pid == 0:
                time.sleep(120)
                os._exit(0)
            held.append(pid)
    except OSError:
        pass
    if len(held) >= 300:
        raise RuntimeError(f"the module's process held {len(held)} processes")

run_spec = RunSpec.define(id="acme.fork-bomb/v1", agents={"sam": scripted()}, execute=execute)
"""


def test_the_modules_process_holds_no_more_processes_than_an_agent(tmp_path: Path) -> None:
    _, done = _run_module(tmp_path, "fork_bomb.py", FORK_BOMB)
    assert done.returncode == 0, done.stderr[-3000:]


def _temporal_key() -> Any:
    return scripted(credentials={"T": SecretRef(env="TEMPORAL_API_KEY")})


def _operator_key() -> Any:
    return scripted(credentials={"K": SecretRef(env="SOCIETY_SIGNING_KEY")})


def _provider_at_temporal() -> Any:
    at = ProviderConfig(name="t", base_url="http://127.0.0.1:7233/v1", model="m")
    return llm("x", provider=at)


def _key_not_allowed() -> Any:
    openai = dataclasses.replace(named_provider("openai"), api_key_name="GOOGLE_CREDENTIALS")
    return llm("x", provider=openai)


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        (_temporal_key, "credential-not-allowed"),
        (_operator_key, "credential-not-allowed"),
        (_provider_at_temporal, "provider-not-allowed"),
        (_key_not_allowed, "credential-not-allowed"),
    ],
)
async def test_a_roster_gets_no_controller_setting_and_calls_no_provider_unless_allowed(
    agent: Any, reason: str, artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_API_KEY", "tk-operator")
    monkeypatch.delenv("SOCIETY_CREDENTIALS", raising=False)
    monkeypatch.delenv("SOCIETY_PROVIDER_URLS", raising=False)

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("nothing starts")

    spec = RunSpec.define(id="acme.take-settings/v1", agents={"eve": agent()}, execute=execute)
    with pytest.raises(HandoverRefused) as refused:
        await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert refused.value.reason == reason
    assert os.listdir(artifact_root) == []  # no run directory, no ledger


CREDENTIAL_PROBE = """\
import json
from pathlib import Path
from controller import RunSpec, scripted
from controller.agents import SecretRef

async def execute(ctx):
    return None

run_spec = RunSpec.define(
    id="acme.credential/v1",
    agents={"sam": scripted(credentials={"TOKEN": SecretRef(env="ACME_TOKEN")})},
    execute=execute,
)
"""


def test_society_run_hands_over_a_credential_only_with_credential(tmp_path: Path) -> None:
    module = tmp_path / "credential.py"
    module.write_text(CREDENTIAL_PROBE)
    env = {**os.environ, "ACME_TOKEN": "t-123"}
    env.pop("SOCIETY_CREDENTIALS", None)
    root = str(tmp_path / "artifacts")
    refused = _society("run", str(module), "--artifacts", root, env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "society run --credential ACME_TOKEN" in refused.stderr
    allowed = _society(
        "run", str(module), "--artifacts", root, "--credential", "ACME_TOKEN", env=env
    )
    assert allowed.returncode == 0, allowed.stderr[-3000:]


async def test_an_oversize_owner_request_is_a_typed_refusal_and_the_bridge_stays_up(
    artifact_root: Path,
) -> None:
    from controller.agents import ScriptedOwner
    from controller.agents.bridge import OwnerError

    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> None:
        owner = ctx.agents.owner("sam", ScriptedOwner)
        with pytest.raises(OwnerError) as refused:
            await owner.instruct("x" * (10 << 20))
        seen["reason"] = refused.value.reason
        seen["state"] = await owner.state()  # the same bridge still answers

    spec = RunSpec.define(id="acme.big-instruct/v1", agents={"sam": scripted()}, execute=execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert seen["reason"] == "owner-request-too-large"
    assert isinstance(seen["state"], dict)


MISUSED_CALL = """\
from controller import RunSpec, scripted

NAME = {"not": "a name"}

async def endpoint(ctx):
    async with ctx.network.endpoint(NAME):
        pass

async def disable(ctx):
    async with ctx.network.links.disable(NAME, "sam"):
        pass

async def opened(ctx):
    async with ctx.network.endpoint("host") as host:
        await host.open(NAME)

async def emit(ctx):
    await ctx.events.emit(NAME)

async def execute(ctx):
    untyped = []
    for attempt in (endpoint, disable, opened, emit):
        try:
            await attempt(ctx)
        except Exception as exc:
            if not isinstance(getattr(exc, "reason", None), str) or " at 0x" in str(exc):
                untyped.append(f"{attempt.__name__}: {type(exc).__name__}: {exc}")
        else:
            untyped.append(f"{attempt.__name__}: a map was taken as a name")
    if untyped:
        raise RuntimeError("; ".join(untyped))

run_spec = RunSpec.define(id="acme.misused-call/v1", agents={"sam": scripted()}, execute=execute)
"""


def test_a_misused_call_is_a_typed_refusal_that_shows_no_controller_object(tmp_path: Path) -> None:
    _, done = _run_module(tmp_path, "misused_call.py", MISUSED_CALL)
    assert done.returncode == 0, done.stderr[-3000:]


SLOW_POLICY = """\
import time

import anyio

from controller import RunSpec, scripted
from controller.network.links import Deliver


def slow(delivery):
    time.sleep(0.5)  # the module's policy takes its time over every verdict
    return Deliver()


async def execute(ctx):
    ann, ben = ctx.agents.ann.agent, ctx.agents.ben.agent
    async with ctx.network.endpoint("host") as host:
        async with ctx.network.links.shape(host.participant, ann, slow, "slow"):
            to_ann, to_ben = await host.open(ann), await host.open(ben)
            await to_ann.send("through the slow link")
            await to_ben.send("beside it")
            await anyio.sleep(2)  # both delivered and acknowledged by now


run_spec = RunSpec.define(
    id="acme.slow-policy/v1", agents={"ann": scripted(), "ben": scripted()}, execute=execute
)
"""


def test_a_slow_link_policy_of_the_module_delays_only_its_own_link(tmp_path: Path) -> None:

    from controller import RouterMessageCommitted, delivered_pairs

    module, done = _run_module(tmp_path, "slow_policy.py", SLOW_POLICY)
    assert done.returncode == 0, done.stderr[-3000:]
    ledger = _ledger_of(module, done)
    sent = {e.parts[0]: e.message_id for e in ledger.events(RouterMessageCommitted)}
    order = list(delivered_pairs(record.event for record in ledger))
    slow_one = (sent["through the slow link"], "agent:ann")
    beside = (sent["beside it"], "agent:ben")
    # the verdict was awaited off the router's loop: the other link's message, sent after the
    # slow one, reached its agent before the slow one's verdict came
    assert slow_one in order and beside in order
    assert order.index(beside) < order.index(slow_one)


DELAYED_LINK = """\
import anyio

from controller import RunSpec, scripted


async def execute(ctx):
    ann = ctx.agents.ann.agent
    async with ctx.network.endpoint("host") as host:
        async with ctx.network.links.delay(host.participant, ann, 0.2):
            to_ann = await host.open(ann)
            await to_ann.send("delayed")
            await anyio.sleep(1.5)


run_spec = RunSpec.define(id="acme.delayed-link/v1", agents={"ann": scripted()}, execute=execute)
"""


def test_a_link_the_modules_program_delays_delivers_after_its_delay(tmp_path: Path) -> None:

    from controller import RouterMessageCommitted, delivered_pairs
    from controller.events.network import LinkMessageDelayed

    module, done = _run_module(tmp_path, "delayed_link.py", DELAYED_LINK)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "callback failed" not in done.stderr
    ledger = _ledger_of(module, done)
    (sent,) = [e.message_id for e in ledger.events(RouterMessageCommitted)]
    assert [e.message_id for e in ledger.events(LinkMessageDelayed)] == [sent]
    assert (sent, "agent:ann") in list(delivered_pairs(record.event for record in ledger))
