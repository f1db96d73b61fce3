"""Runtime descriptors, terminations, local admission and harvest, without a run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from controller.agents import (
    Completed,
    Exited,
    Harvest,
    Observation,
    ProcessExit,
    Resources,
    RuntimeDescriptorError,
    Signaled,
    peer,
    scripted,
)
from controller.agents.llm import llm
from controller.platforms.local import LocalCapacity, LocalPlatform
from controller.platforms.local.harvest import copy_declared
from controller.run import AdmissionRefused
from society_sandbox.runtimes.scripted import ScriptedPolicy


def test_a_scripted_runtime_writes_its_policy_file_and_harvests_it() -> None:
    policy = ScriptedPolicy.negotiator(offers=("a",))
    runtime = scripted(policy, files={"notes.md": "hello"})
    assert runtime.runtime == "scripted"
    assert runtime.command == ("python", "-m", "agent_images.scripted")
    assert ScriptedPolicy.model_validate(json.loads(runtime.files["policy.json"])) == policy
    assert runtime.files["notes.md"] == b"hello"
    assert runtime.harvest.files == ("policy.json",)
    assert set(runtime.file_digests()) == {"notes.md", "policy.json"}


@pytest.mark.parametrize(
    ("describe", "reason"),
    [
        (lambda: scripted(files={"/etc/passwd": "x"}), "bad-path"),
        (lambda: scripted(files={"../outside": "x"}), "bad-path"),
        (lambda: scripted(files={"policy.json": "{}"}), "bad-path"),
        (
            lambda: scripted(environment={"SOCIETY_ROUTER_URL": "ws://elsewhere"}),
            "reserved-variable",
        ),
        (lambda: Harvest(files=("a/../../b",)), "bad-path"),
        (lambda: Resources(cpu=1, memory_mib=512, memory_limit_mib=256), "bad-resources"),
    ],
)
def test_a_malformed_runtime_is_refused_when_described(describe: Any, reason: str) -> None:
    with pytest.raises(RuntimeDescriptorError) as failure:
        describe()
    assert failure.value.reason == reason


@pytest.mark.parametrize(
    "path",
    [
        "notes\n/../../etc/passwd",  # a newline once hid the '..' from the pattern
        "ok.md\n",
        "a\x00b",
        "a\rb",
        "a\x1b[31mb",
        "a\u202eb",  # bidi override
        "a\u2028b",
        "/abs",
        "..",
        "a/../../b",
        "a//b",
        "./",
        "",
    ],
)
def test_a_file_or_harvest_path_with_a_way_out_or_a_control_character_is_refused(
    path: str,
) -> None:
    with pytest.raises(RuntimeDescriptorError) as as_file:
        scripted(files={path: "x"})
    with pytest.raises(RuntimeDescriptorError) as as_harvest:
        Harvest(files=(path,))
    assert as_file.value.reason == as_harvest.value.reason == "bad-path"
    assert "inside the working directory" in str(as_file.value)


def test_cluster_profiles_can_tell_a_digest_pinned_image() -> None:
    assert not scripted().image_pinned
    pinned = dataclasses.replace(scripted(), image="ghcr.io/acme/scripted@sha256:" + "a" * 64)
    assert pinned.image_pinned


def test_a_process_exit_reads_as_a_termination() -> None:
    assert ProcessExit.from_returncode(-9).plain() == Signaled(9)
    assert Signaled(9).signal_name == "SIGKILL"
    assert ProcessExit.from_returncode(3).plain() == Exited(3)


@pytest.mark.anyio
async def test_an_observation_is_awaitable_once_and_keeps_its_first_value() -> None:
    observation: Observation[Any] = Observation()
    assert not observation.done and observation.peek() is None
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: _later(observation))
        assert await observation == Completed()
    observation.set(Exited(1))
    assert await observation.wait() == Completed()


async def _later(observation: Observation[Any]) -> None:
    await anyio.sleep(0.01)
    observation.set(Completed())


def test_local_admission_takes_the_complete_roster_or_refuses_it() -> None:
    roster = {f"a{i}": scripted() for i in range(10)}
    platform = LocalPlatform(LocalCapacity(cpu=1.0, memory_mib=10_000, agents=10))
    admission = platform.admit(roster)
    assert admission.requested.agents == 10 and admission.requested.cpu == pytest.approx(0.2)
    with pytest.raises(AdmissionRefused) as refused:
        LocalPlatform(LocalCapacity(cpu=1.0, memory_mib=100, agents=10)).admit(roster)
    assert refused.value.reason == "insufficient-memory"
    assert "640 MiB > 100 MiB" in str(refused.value)
    with pytest.raises(AdmissionRefused) as crowded:
        LocalPlatform(LocalCapacity(cpu=1.0, memory_mib=10_000, agents=9)).admit(roster)
    assert crowded.value.reason == "too-many-agents"


def test_harvest_refuses_a_link_out_of_the_working_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("not the agent's")
    (work / "escape").symlink_to(tmp_path / "secret.txt")
    (work / "ok.txt").write_text("fine")
    log = tmp_path / "output.log"
    items = copy_declared(
        work, log, Harvest(files=("escape", "ok.txt")), tmp_path / "out", tmp_path
    )
    outcomes = {item.name: (item.outcome, item.detail) for item in items}
    assert outcomes["escape"] == (
        "unreadable",
        "a symbolic link on the path (harvest follows none)",
    )
    assert outcomes["ok.txt"] == ("harvested", None)
    assert outcomes["output.log"] == ("absent", None)
    assert (tmp_path / "out" / "workspace" / "ok.txt").read_text() == "fine"


@pytest.mark.parametrize(
    ("build", "typo", "near"),
    [
        (lambda **kw: llm("Ann", **kw), "instruction", "instructions"),
        (lambda **kw: scripted(**kw), "polcy", "policy"),
        (
            lambda **kw: peer("p.py", "f", files={"p.py": "def f(r): pass"}, **kw),
            "max_send",
            "max_sends",
        ),
    ],
)
def test_a_mistyped_runtime_option_is_refused_naming_the_nearest_one(
    build: Any, typo: str, near: str
) -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        build(**{typo: 1})
    assert refused.value.reason == "unknown-option"
    assert f"has no option {typo!r}; did you mean {near!r}?" in str(refused.value)
