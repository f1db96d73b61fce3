"""The test suite's work units under pytest-xdist (tests/work_units.py): a unit split across the
two workers would make two kind clusters at once and share each folder's session fixtures."""

from __future__ import annotations

import pytest
from work_units import KIND_UNIT, FolderScheduling, unit_of


def test_the_kind_clusters_folders_are_one_unit_and_every_other_folder_its_own() -> None:
    assert unit_of("tests/kind/test_kind_cluster.py::test_a") == KIND_UNIT
    assert unit_of("tests/kubernetes/node/test_runs.py::test_b[its program exits]") == KIND_UNIT
    assert unit_of("tests/kubernetes/test_roster_admission.py::test_c") == KIND_UNIT
    assert unit_of("tests/ledger/test_ledger_writer.py::test_d[a/b::c]") == "ledger"
    assert unit_of("tests/test_docs.py::test_e") == "test_docs"


def test_the_suites_scheduler_gives_a_whole_unit_to_one_worker(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler that scripts/test.sh's `--dist loadscope` gets from tests/conftest.py."""
    monkeypatch.setattr(pytestconfig.option, "dist", "loadscope")
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"])  # what -n 2 sets
    scheduler = pytestconfig.hook.pytest_xdist_make_scheduler(config=pytestconfig, log=None)
    assert isinstance(scheduler, FolderScheduling)
    ids = [
        "tests/kind/test_kind_cluster.py::t",
        "tests/kubernetes/node/test_runs.py::t",
        "tests/ledger/test_ledger_writer.py::t",
        "tests/ledger/test_ledger_fuzz.py::t",
    ]
    assert [scheduler._split_scope(i) for i in ids] == [KIND_UNIT, KIND_UNIT, "ledger", "ledger"]
