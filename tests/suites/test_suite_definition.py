"""Suite.define checks a suite when its module loads, like RunSpec.define."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from controller.agents import scripted
from controller.run import RunContext, RunSpec
from controller.suites import Suite, SuiteError, load_suite
from controller.suites.definition import Slot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def _execute(ctx: RunContext) -> None:
    return None


def _build(competitors: Mapping[str, Any]) -> RunSpec:
    return RunSpec.define(
        id="acme.test/v1", agents={name: scripted() for name in competitors}, execute=_execute
    )


def _define(**overrides: Any) -> Suite:
    fields: dict[str, Any] = {
        "id": "test-suite",
        "competitors": {"ada": 1, "bo": 2, "cy": 3},
        "build": _build,
        "matchups": "pairs",
        "seeds": [1, 2],
        "grader": "grader.py",
        "result": "winner",
    }
    return Suite.define(**{**fields, **overrides})


def test_pairs_meet_in_every_ordered_pair_once_per_seed() -> None:
    slots = _define().slots()
    assert len(slots) == 3 * 2 * 2
    assert Slot(("ada", "bo"), 1) in slots and Slot(("bo", "ada"), 1) in slots
    assert all(slot.competitors[0] != slot.competitors[1] for slot in slots)
    assert len({slot.key for slot in slots}) == len(slots)


def test_single_runs_each_competitor_alone_on_every_seed() -> None:
    slots = _define(matchups="single", result="score").slots()
    assert [slot.key for slot in slots[:2]] == ["ada/seed-1", "ada/seed-2"]
    assert len(slots) == 6


def test_build_gets_exactly_the_competitors_taking_part() -> None:
    spec = _define().run_spec_for(("cy", "ada"))
    assert list(spec.agents) == ["cy", "ada"]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"id": "Bad Id"}, "bad-id"),
        ({"competitors": {}}, "bad-competitors"),
        ({"competitors": {"Ada": 1, "bo": 2}}, "bad-competitor-name"),
        ({"competitors": {"tie": 1, "bo": 2}}, "bad-competitor-name"),
        ({"competitors": {"ada": 1}}, "bad-competitors"),
        ({"matchups": "league"}, "bad-matchups"),
        ({"seeds": []}, "bad-seeds"),
        ({"seeds": [1, 1]}, "bad-seeds"),
        ({"seeds": [-1]}, "bad-seeds"),
        ({"grader": "grader.txt"}, "bad-grader"),
        ({"result": ""}, "bad-result-field"),
        ({"build": "not callable"}, "bad-build"),
    ],
)
def test_a_bad_definition_fails_when_defined_with_a_reason(
    overrides: dict[str, Any], reason: str
) -> None:
    with pytest.raises(SuiteError) as caught:
        _define(**overrides)
    assert caught.value.reason == reason


def test_a_build_that_returns_no_run_spec_is_refused_with_a_reason() -> None:
    suite = _define(build=lambda competitors: {"not": "a spec"})
    with pytest.raises(SuiteError) as caught:
        suite.run_spec_for(("ada", "bo"))
    assert caught.value.reason == "bad-build"
    with pytest.raises(SuiteError) as unknown:
        _define().run_spec_for(("ada", "zed"))
    assert unknown.value.reason == "unknown-competitor"


def test_a_module_without_a_suite_is_refused(tmp_path: Path) -> None:
    module = tmp_path / "empty_suite.py"
    module.write_text("x = 1\n")
    with pytest.raises(SuiteError) as caught:
        load_suite(module)
    assert caught.value.reason == "no-suite"
    broken = tmp_path / "broken_suite.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(SuiteError) as failed:
        load_suite(broken)
    assert failed.value.reason == "module-import-failed"


def test_the_example_suite_has_three_scripted_competitors_as_pairs_on_five_seeds() -> None:
    suite = load_suite(EXAMPLES / "negotiation_suite.py")
    assert suite.matchups == "pairs" and len(suite.competitors) >= 3 and len(suite.seeds) == 5
    assert suite.grader_path() == (EXAMPLES / "graders" / "negotiation_suite.py").resolve()
    spec = suite.run_spec_for(("fair", "yielder"))
    assert list(spec.agents) == ["fair", "yielder"]
    assert {type(descriptor).runtime for descriptor in spec.agents.values()} == {"scripted"}
