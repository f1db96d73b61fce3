"""What crosses the module process's channel: data rebuilds, anything else is refused.

The controller decodes what the module's process sends; these are the refusals an attacker
there meets (a class to construct, a private one, a nesting bomb, a handle never given), and
the round trip the shipped runtimes' descriptors make.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from controller import ScriptedPolicy, scripted
from controller.program.codec import CodecError, Decoder, encode
from controller.program.process import runtime_catalog
from ledger.events import Event


def _refuse(body: Mapping[str, Any]) -> object:
    raise CodecError("no handle here")


def _no_event(wire: Mapping[str, Any]) -> Event:
    raise CodecError("no event here")


DECODER = Decoder(resolve=_refuse, event=_no_event, catalog=runtime_catalog)


@pytest.mark.parametrize(
    "name",
    [
        "subprocess:Popen",
        "os:system",
        "builtins:eval",
        "controller.run.kernel:Run",
        "controller.agents.runtime:_Missing",
        "ledger.writer:LedgerWriter",
    ],
)
def test_no_class_outside_the_data_modules_is_constructed(name: str) -> None:
    with pytest.raises(CodecError):
        DECODER.decode({"$data": [name, {"args": ["id"]}]})
    with pytest.raises(CodecError):
        DECODER.decode({"$model": [name, {}]})


@pytest.mark.parametrize(
    "module",
    [
        "controller.agents.__main__",
        "controller.modelgateway._http",
        "society_sandbox.runtimes.__main__",
        "agent_images.scripted.__main__",
        "controller.agents.llm.sneaky",
    ],
)
def test_decoding_imports_no_module_a_name_merely_starts_like(module: str) -> None:
    import sys

    before = set(sys.modules)
    with pytest.raises(CodecError):
        DECODER.decode({"$data": [f"{module}:main", {}]})
    assert module not in set(sys.modules) - before


def test_a_shipped_descriptor_round_trips_and_runs_its_own_checks() -> None:
    descriptor = scripted(ScriptedPolicy.negotiator(offers=("a", "b"), accepts=("c",)))
    rebuilt = DECODER.decode(encode(descriptor))
    assert type(rebuilt) is type(descriptor) and rebuilt.policy == descriptor.policy
    assert rebuilt.files == descriptor.files and rebuilt.resources == descriptor.resources
    assert rebuilt.events.tags == descriptor.events.tags
    wire = encode(descriptor)
    wire["$data"][1]["bridge_port"] = 70000  # the descriptor's own check refuses it
    with pytest.raises(Exception, match="out of range"):
        DECODER.decode(wire)


@dataclass
class ModulesOwn:
    value: int


@pytest.mark.parametrize("value", [ModulesOwn(1), print, lambda: None, object(), {1: "a"}])
def test_what_is_not_data_does_not_cross(value: object) -> None:
    with pytest.raises(CodecError):
        encode(value)


def test_a_nesting_bomb_and_a_handle_never_given_are_refused() -> None:
    bomb: Any = "x"
    for _ in range(200):
        bomb = [bomb]
    with pytest.raises(CodecError, match="deeper"):
        DECODER.decode(bomb)
    with pytest.raises(CodecError, match="no handle"):
        DECODER.decode({"$handle": {"id": 1}})
    with pytest.raises(CodecError):
        DECODER.decode({"$event": {"tag": "society.router-message-committed/v1"}})
    with pytest.raises(CodecError, match="not an encoded value"):
        DECODER.decode({"a": 1, "b": 2})
    with pytest.raises(CodecError, match="shipped runtime"):  # a catalog holds only theirs
        DECODER.decode({"$catalog": ["society.router-message-committed/v1", "acme.own/v1"]})
