"""``society replay RUN_DIR``: the run's own module again, same seed, roster and parameters,
compared with the original conversation by conversation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from forks_support import EXAMPLES, PROGRAMS, Society

pytestmark = pytest.mark.slow


def test_a_scripted_negotiation_replays_identically(society: Society) -> None:
    original = society.run_dir(society.run(EXAMPLES / "negotiation.py"))
    assert (original / "module" / "negotiation.py").read_bytes() == (
        EXAMPLES / "negotiation.py"
    ).read_bytes()

    replay = society("replay", original)

    assert replay.code == 0, replay.stderr
    line = replay.line()
    assert line["replay"] == "identical" and line["messages"] == 7
    assert line["original"] == original.name and line["runId"] != original.name
    assert "identical: 7 messages" in replay.stderr
    started = json.loads((original / "ledger" / "main" / "manifest.json").read_text())
    replayed = json.loads((society.artifacts / line["runId"] / "run.json").read_text())
    assert replayed["seed"] == started["metadata"]["seed"]


def test_a_peer_society_replays_identically(society: Society) -> None:
    peers = Path(__file__).resolve().parents[2] / "examples" / "peers"  # the module reads tally.py
    original = society.run_dir(society.run(PROGRAMS / "peer_rounds.py", "--include", peers))

    replay = society("replay", original, "--include", peers)

    assert replay.code == 0, replay.stderr
    assert replay.line()["replay"] == "identical" and replay.line()["messages"] == 12


def test_a_replay_names_the_first_divergence_whose_it_is_and_what_differs(
    society: Society,
) -> None:
    original = society.run_dir(society.run(PROGRAMS / "unseeded.py"))

    replay = society("replay", original)

    assert replay.code == 1, replay.stderr
    line = replay.line()
    assert line["replay"] == "diverged" and line["outcome"] == "ProgramFinished"
    divergence = line["divergence"]
    assert divergence["stream"] == "conversation 1" and divergence["index"] == 0
    assert divergence["sender"] == "endpoint:host" and divergence["differs"] == ["parts"]
    assert divergence["original"]["parts"] != divergence["replay"]["parts"]


def test_a_replay_runs_the_kept_module_when_the_original_file_has_changed(
    society: Society,
) -> None:
    module = society.artifacts.parent / "negotiation.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "negotiation.py", module)
    original = society.run_dir(society.run(module))
    module.write_text(module.read_text().replace("split 70/30", "split 90/10"))

    replay = society("replay", original)

    assert replay.code == 0, replay.stderr
    assert replay.line()["replay"] == "identical"


def test_a_tampered_ledger_is_refused_before_anything_runs(
    society: Society, hello_run: Path
) -> None:
    tampered = society.artifacts / "tampered"
    shutil.copytree(hello_run, tampered)
    records = tampered / "ledger" / "main" / "records.ndjson"
    records.write_text(records.read_text().replace("hello ben", "hello bob"))

    replay = society("replay", tampered)

    assert replay.code == 2 and replay.stdout == ""
    assert "error: " in replay.stderr and "does not verify" in replay.stderr
    assert not list(society.artifacts.glob("sr-*"))


def test_an_llm_society_at_temperature_0_reports_whether_it_replays_identically(
    society: Society, llm_run: Path
) -> None:
    """The local model (SmolLM2 on llama.cpp) at temperature 0, one agent answering twice: the
    replay is identical (greedy decoding of the same prompts on the same machine)."""
    replay = society("replay", llm_run, "--artifacts", society.artifacts, timeout_s=400)

    line = replay.line()
    assert line["outcome"] == "ProgramFinished" and line["exit"] == "success", replay.stderr
    assert line["replay"] == "identical", line.get("divergence")
    assert replay.code == 0


def test_a_replay_runs_with_the_parameters_the_original_ran_with(society: Society) -> None:
    original = society.run_dir(society.run(PROGRAMS / "parameterized.py", "--set", "times=2"))

    replay = society("replay", original)

    assert replay.code == 0, replay.stderr
    line = replay.line()
    assert line["replay"] == "identical" and line["messages"] == 4
    first = (society.artifacts / line["runId"] / "ledger" / "main" / "records.ndjson").read_text()
    started = json.loads(first.splitlines()[0])["event"]
    assert started["parameters"] == {"word": "hello", "times": 2}
