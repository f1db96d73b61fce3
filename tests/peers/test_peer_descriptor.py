"""A peer's definition is checked when the RunSpec is defined: module, function, files."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.agents import RuntimeDescriptorError, peer
from controller.run.spec import RunSpecError, load_run_spec
from society_sandbox.runtimes.peer import (
    PEER_CONFIG_FILE,
    Decision,
    PeerSettings,
    PolicyError,
    Say,
    as_decision,
)

POLICY = "def respond(received):\n    return None\n"


@pytest.mark.parametrize(
    ("module", "function", "files", "reason", "says"),
    [
        ("absent.py", "respond", {"p.py": POLICY}, "policy-module-missing", "not one of its files"),
        ("p.py", "reply", {"p.py": POLICY}, "policy-function-missing", "no top-level function"),
        ("p.py", "x", {"p.py": "x = lambda r: None\n"}, "policy-function-missing", "'def'"),
        ("p.py", "respond", {"p.py": "def respond(:\n"}, "bad-policy-module", "does not parse"),
        ("p.txt", "respond", {"p.txt": POLICY}, "bad-policy-module", "must be a .py file"),
        ("p.py", "respond", {"p.py": Path("/no/such/policy.py")}, "peer-file-missing", "fix"),
        ("p.py", "respond", {"p.py": POLICY, "peer.json": "{}"}, "bad-path", "written from"),
    ],
)
def test_a_bad_peer_definition_is_refused_with_a_reason_and_a_next_step(
    module: str, function: str, files: dict[str, str | Path], reason: str, says: str
) -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        peer(module, function, files=files)
    assert refused.value.reason == reason and says in str(refused.value)


def test_a_spec_module_with_a_peer_missing_its_function_fails_when_loaded(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.py").write_text(POLICY)
    spec_module = tmp_path / "experiment.py"
    spec_module.write_text(
        "from pathlib import Path\n"
        "from controller import RunSpec\n"
        "from controller.agents import peer\n"
        "async def execute(ctx):\n    return None\n"
        "run_spec = RunSpec.define(id='acme.peer-def/v1', execute=execute, agents={\n"
        "    'eve': peer('policy.py', 'decide', files={'policy.py': Path(__file__).parent / "
        "'policy.py'})})\n"
    )
    with pytest.raises(RunSpecError) as refused:
        load_run_spec(spec_module)
    assert refused.value.reason == "module-import-failed"
    assert "defines no top-level function 'decide' (it defines respond)" in str(refused.value)


def test_a_policy_may_return_a_reply_a_say_a_list_or_a_decision_and_nothing_else() -> None:
    assert as_decision(None) == Decision()
    assert as_decision("hi") == Decision(say=(Say("hi"),))
    assert as_decision([Say("a"), Say("b", to=("bob",))]).say[1].to == ("bob",)
    assert as_decision(Decision(publish={"n": 1})).publish == {"n": 1}
    for bad in (42, [Say("a"), "b"], Say("  "), Decision(publish={"f": object()})):
        with pytest.raises(PolicyError):
            as_decision(bad)


@pytest.mark.parametrize(
    ("packages", "says"),
    [
        ("numpy", "give a tuple of requirements"),
        (("numpy>=>1",), "is not a PEP 508 requirement"),
        (("pkg @ https://example.org/pkg.whl",), "names a URL"),
        (("",), "is not a requirement"),
    ],
)
def test_a_peer_declares_its_packages_as_requirements_or_is_refused(
    packages: object, says: str
) -> None:
    with pytest.raises(RuntimeDescriptorError) as refused:
        peer("p.py", "respond", files={"p.py": POLICY}, packages=packages)  # type: ignore[arg-type]
    assert refused.value.reason == "bad-requirement" and says in str(refused.value)


def test_the_declared_packages_travel_in_the_descriptor_and_in_peer_json() -> None:
    """What an image build (or the peer itself, in its sandbox) reads to honour them."""
    eve = peer("p.py", "respond", files={"p.py": POLICY}, packages=("numpy>=1.26", "scipy"))
    assert eve.packages == ("numpy>=1.26", "scipy")
    settings = PeerSettings.model_validate_json(eve.files[PEER_CONFIG_FILE])
    assert settings.packages == ("numpy>=1.26", "scipy")
    assert peer("p.py", "respond", files={"p.py": POLICY}).packages == ()


def test_a_peer_has_a_longer_stop_grace_than_the_default_and_may_set_its_own() -> None:
    assert peer("p.py", "respond", files={"p.py": POLICY}).term_grace_s == 10.0
    assert peer("p.py", "respond", files={"p.py": POLICY}, term_grace_s=30).term_grace_s == 30
    with pytest.raises(RuntimeDescriptorError) as refused:
        peer("p.py", "respond", files={"p.py": POLICY}, term_grace_s=0)
    assert refused.value.reason == "bad-option"
