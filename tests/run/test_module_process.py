"""``society run`` keeps the researcher's module out of the controller: a hostile module, run as a
user runs one, reaches neither the operator's key nor the ledger writer, and what it may do
through ``ctx`` is only what ``controller.program.exports`` lists.

The module (``hostile_program.py``) knows where the key file is; the run is signed with that
key, so a ``pinned`` verification against it shows the key signed this run and only this run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.verification import verify_ledger
from tests.run.test_hostile_module import MAKE_KEY

ROOT = Path(__file__).resolve().parents[2]
MODULE = Path(__file__).with_name("hostile_program.py")
SHAPED = Path(__file__).with_name("shaped_program.py")
GARBAGE = Path(__file__).with_name("garbage_program.py")
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def society_run(module: Path, artifacts: Path, key: Path, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "SOCIETY_SIGNING_KEY": str(key)}
    done = subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(artifacts), *extra],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return line


@pytest.fixture
def operator_key(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "keys" / "operator.pem"
    path.parent.mkdir()
    made = subprocess.run(
        [sys.executable, "-c", MAKE_KEY, str(path)], capture_output=True, text=True, check=True
    )
    _, public = made.stdout.split()
    return path, public


def _hunt(line: dict[str, Any], public: str) -> dict[str, Any]:
    verified = verify_ledger(None, line["ledger"], trusted_key=public, require_catalog=False)
    assert verified.signature == "pinned" and verified.unsigned_records == 0
    records = list(verified.envelopes)
    assert not [r for r in records if r.tag == "society.router-message-committed/v1"], (
        "the program sent nothing, so the router committed nothing"
    )
    (hunt,) = [r for r in records if r.tag == "hostile.program-hunt/v1"]
    assert hunt.producer == "program"
    return dict(hunt.event)


@pytest.mark.parametrize("sandbox", ["sandboxed", "unsandboxed"])
def test_a_hostile_module_reaches_neither_the_key_nor_the_ledger_writer(
    tmp_path: Path, operator_key: tuple[Path, str], sandbox: str
) -> None:
    key, public = operator_key
    module = tmp_path / "module" / "hostile_program.py"
    module.parent.mkdir()
    artifacts = tmp_path / "artifacts"
    text = MODULE.read_text().replace("@KEY_PATH@", str(key))
    module.write_text(text.replace("@ARTIFACTS@", str(artifacts)))
    extra = ("--unsandboxed",) if sandbox == "unsandboxed" else ()
    line = society_run(module, artifacts, key, *extra)
    assert line["outcome"] == "ProgramFinished" and line["exit"] == "success", line
    hunt = _hunt(line, public)
    assert hunt["keyVariable"] is None, "the module's process is not told where the key is"
    assert hunt["objects"] == [], "no writer, router, signer or key object is in its process"
    assert hunt["private"] == [], "ctx holds no reference to the controller's objects"
    assert hunt["calls"] == {
        "events._writer": "refused: member-not-exported",
        "events.__class__": "refused: member-not-exported",
        "ledger._writer": "refused: member-not-exported",
        "ledger.append": "refused: member-not-exported",
        "handle 999999": "refused: unknown-handle",
    }
    assert hunt["coreEmit"] == "refused: undeclared-event"
    if sandbox == "sandboxed":  # unsandboxed, it is the operator's own process: see security.md
        assert hunt["keyAtImport"] == "refused: FileNotFoundError"
        assert hunt["keyInProgram"] == "refused: FileNotFoundError"
        assert hunt["ownFolderWrite"] == "refused: OSError"  # read-only (EROFS)
        assert hunt["runDirectory"] == "refused: FileNotFoundError"
        assert not list(module.parent.glob("*.planted"))


def test_a_module_program_shapes_links_with_its_own_policy_and_reads_its_ledger(
    tmp_path: Path, operator_key: tuple[Path, str]
) -> None:
    key, public = operator_key
    line = society_run(SHAPED, tmp_path / "artifacts", key)
    assert line["outcome"] == "ProgramFinished" and line["exit"] == "success", line
    verified = verify_ledger(None, line["ledger"], trusted_key=public, require_catalog=False)
    by_tag = [(r.tag, r.producer, dict(r.event)) for r in verified.envelopes]
    (received,) = [event for tag, _, event in by_tag if tag == "shaped.received/v1"]
    assert received["texts"] == ["keep one", "keep two"]
    drops = [event for tag, _, event in by_tag if tag == "society.link-message-dropped/v1"]
    assert [drop["reason"] for drop in drops] == ["said drop"]
    assert [p for tag, p, _ in by_tag if tag == "society.link-policy-set/v1"] == ["links"]


@pytest.mark.parametrize(
    ("garbage", "reason"), [("huge", "frame-too-large"), ("junk", "frame-malformed")]
)
def test_garbage_on_the_modules_channel_fails_the_program_and_keeps_the_evidence(
    tmp_path: Path, operator_key: tuple[Path, str], garbage: str, reason: str
) -> None:
    key, public = operator_key
    module = tmp_path / "module" / "garbage_program.py"
    module.parent.mkdir()
    module.write_text(GARBAGE.read_text().replace("@GARBAGE@", garbage))
    env = {**os.environ, "SOCIETY_SIGNING_KEY": str(key)}
    done = subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(tmp_path / "artifacts")],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert (line["outcome"], line["exit"], line["receipt"]) == (
        "ProgramFinished",
        "failure",
        "complete",
    )
    verified = verify_ledger(None, line["ledger"], trusted_key=public, require_catalog=False)
    assert verified.signature == "pinned" and verified.unsigned_records == 0
    (failed,) = [r.event for r in verified.envelopes if r.tag == "society.program-failed/v1"]
    assert (failed["reason"], failed["errorType"]) == (reason, "ChannelClosed"), failed
