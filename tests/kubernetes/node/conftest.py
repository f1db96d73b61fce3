"""Under tests/kubernetes/node the shared helpers (``cluster_support``'s queues, ``settings``)
get the kind cluster whose pods run, not KWOK's fake nodes (tests/kubernetes/conftest.py)."""

from __future__ import annotations

import pytest
from kind_plane import KindPlane


@pytest.fixture(scope="session")
def control_plane(node_plane: KindPlane) -> KindPlane:
    return node_plane
