"""RunSpec parameters: ``RunSpec.define(..., parameters=Model)`` and ``society run --set K=V``."""

from __future__ import annotations

import json

import pytest
from forks_support import EXAMPLES, PROGRAMS, Society
from pydantic import BaseModel, ConfigDict

from controller import RunContext, RunSpec, ScriptedPolicy, scripted
from controller.run import RunSpecError


async def _nothing(ctx: RunContext) -> None:
    return None


@pytest.mark.slow
def test_set_values_reach_the_program_and_the_ledger_records_them(society: Society) -> None:
    run_dir = society.run_dir(
        society.run(PROGRAMS / "parameterized.py", "--set", "word=hi there", "--set", "times=2")
    )

    records = (run_dir / "ledger" / "main" / "records.ndjson").read_text().splitlines()
    started = json.loads(records[0])["event"]
    assert started["parameters"] == {"word": "hi there", "times": 2}
    sent = [
        json.loads(line)["event"]["parts"]
        for line in records
        if '"society.router-message-committed/v1"' in line and "endpoint:host" in line
    ]
    assert sent == [["hi there"], ["hi there"]]


@pytest.mark.slow
def test_a_run_without_set_records_the_defaults(society: Society) -> None:
    run_dir = society.run_dir(society.run(PROGRAMS / "parameterized.py"))
    first = (run_dir / "ledger" / "main" / "records.ndjson").read_text().splitlines()[0]
    assert json.loads(first)["event"]["parameters"] == {"word": "hello", "times": 1}


@pytest.mark.parametrize(
    ("module", "setting", "said"),
    [
        (PROGRAMS / "parameterized.py", "tims=2", "tims: Extra inputs are not permitted"),
        (PROGRAMS / "parameterized.py", "times=many", "times: Input should be a valid integer"),
        (EXAMPLES / "hello.py", "word=hi", "declares no parameters"),
    ],
)
def test_a_setting_the_spec_does_not_take_is_refused_before_anything_starts(
    society: Society, module: object, setting: str, said: str
) -> None:
    ran = society.run(str(module), "--set", setting)

    assert ran.code == 2 and ran.stdout == ""
    assert said in ran.stderr and "next step" in ran.stderr
    assert not society.artifacts.exists() or not list(society.artifacts.glob("sr-*"))


class _Required(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rounds: int


class _Open(BaseModel):
    rounds: int = 1


@pytest.mark.parametrize(
    ("parameters", "said"),
    [
        (_Required, r"without a default \(rounds\)"),
        (_Open, "forbid unknown fields"),
        (dict, "model"),
    ],
)
def test_a_parameters_model_a_run_cannot_fill_is_refused_when_defined(
    parameters: object, said: str
) -> None:
    with pytest.raises(RunSpecError, match=said) as raised:
        RunSpec.define(
            id="acme.p/v1",
            agents={"ann": scripted(ScriptedPolicy())},
            execute=_nothing,
            parameters=parameters,  # type: ignore[arg-type]
        )
    assert raised.value.reason == "bad-parameters"
