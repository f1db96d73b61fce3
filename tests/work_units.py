"""The test suite's work units under pytest-xdist: one per top-level folder of ``tests/`` (a file
directly under ``tests/`` is its own), so a folder's session fixtures (the lifecycle tests'
Temporal dev server, the example suite's thirty runs, the real runs many tests read) are made
once, by one worker. ``tests/kind`` and ``tests/kubernetes`` are one unit: their kind clusters
are made one after another on one worker, never two side by side on the two cores.

xdist's ``loadgroup`` would do this from markers, but it keys groups on a node-id suffix that
pytest 9.2's node ids no longer carry, so the unit is read from the node id's path here."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

KIND_UNIT = "kind-clusters"
KIND_FOLDERS = frozenset({"kind", "kubernetes"})


def unit_of(nodeid: str) -> str:
    """The unit of a test by its node id (``tests/<folder>/.../test_x.py::test_y[case]``)."""
    parts = nodeid.split("::", 1)[0].split("/")
    if parts[0] == "tests":
        parts = parts[1:]
    top = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
    return KIND_UNIT if top in KIND_FOLDERS else top


class FolderScheduling(LoadScopeScheduling):
    """xdist's scope scheduling (a whole unit to one worker, the next unit to whichever worker
    runs low) with the folder units above for scopes."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
