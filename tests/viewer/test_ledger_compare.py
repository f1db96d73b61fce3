"""``society ledger compare``: the same seed gives no divergence for a turn-taking society; a
different seed, or a ledger edited after the fact, is caught."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from viewer_support import society

from controller.viewer.compare import COMMITTED
from ledger import SigningKey
from ledger.format import RECORDS

TURNS = Path(__file__).resolve().parent / "programs" / "turns.py"


def _run(root: Path, seed: int) -> Path:
    result = society("run", str(TURNS), "--artifacts", str(root), "--seed", str(seed))
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(json.loads(result.stdout)["ledger"])


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("turns")
    return _run(root, 7), _run(root, 7), _run(root, 8)


def _compare(a: Path, b: Path) -> tuple[int, dict[str, object]]:
    result = society("ledger", "compare", str(a), str(b))
    return result.returncode, json.loads(result.stdout)


def test_the_same_seed_gives_no_divergence(three_runs: tuple[Path, Path, Path]) -> None:
    first, again, _ = three_runs
    code, outcome = _compare(first, again)
    assert (code, outcome["same"]) == (0, True)
    assert outcome["messages"] == 10  # the workload's "begin", alice's answer, eight turns


def test_a_different_seed_is_caught_at_the_first_different_turn(
    three_runs: tuple[Path, Path, Path],
) -> None:
    first, _, other_seed = three_runs
    code, outcome = _compare(first, other_seed)
    assert (code, outcome["same"]) == (1, False)
    divergence = outcome["divergence"]
    assert isinstance(divergence, dict) and divergence["stream"] == "conversation 1"
    assert divergence["a"]["parts"] != divergence["b"]["parts"]


def test_an_edited_ledger_does_not_compare_at_all(
    three_runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    first, again, _ = three_runs
    edited = (again / RECORDS).read_text()
    copy = tmp_path / "ledger"
    copy.mkdir()
    for name in ("manifest.json", "completion.json"):
        (copy / name).write_bytes((again / name).read_bytes())
    (copy / RECORDS).write_text(edited.replace("says", "said", 1))
    code, outcome = _compare(first, copy)
    assert (code, outcome["same"], outcome["reason"]) == (1, False, "chain-broken")


def _forged_without(ledger: Path, into: Path, field: str) -> Path:
    """A copy of ``ledger`` whose first committed message lacks ``field``, re-chained and signed
    with a fresh key (``"signature": "self"``): anyone can make one."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ledger"))
    from ledger_testkit import forge

    shutil.copytree(ledger, into)

    def drop_field(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        committed = next(r for r in rows if r["event"]["tag"] == COMMITTED)
        del committed["event"][field]
        return rows

    forge(into, SigningKey.generate(), records=drop_field, set_public_key=True)
    return into


@pytest.mark.parametrize("field", ["senderId", "parts", "messageId"])
def test_a_ledger_verify_rejects_is_refused_by_compare_with_its_reason_not_a_traceback(
    three_runs: tuple[Path, Path, Path], tmp_path: Path, field: str
) -> None:
    first, again, _ = three_runs
    forged = _forged_without(again, tmp_path / "forged", field)
    verify = society("ledger", "verify", str(forged))
    assert verify.returncode == 1 and json.loads(verify.stdout)["reason"] == "event-invalid"
    result = society("ledger", "compare", str(first), str(forged))
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "same": False,
        "reason": "event-invalid",
        "detail": json.loads(result.stdout)["detail"],
    }
