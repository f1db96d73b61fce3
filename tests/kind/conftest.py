"""The kind cluster of test_kind_cluster.py (kind_cluster.py), created once for that module and
deleted after its last test, so it does not share the two cores with the later tests' clusters."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kind_cluster import ENABLE_HINT, KindCluster, script_output

GO = "/usr/local/go/bin/go"


def _missing() -> str | None:
    go = shutil.which("go") or (GO if Path(GO).exists() else None)
    for tool, found in (
        ("podman", shutil.which("podman")),
        ("mmdebstrap", shutil.which("mmdebstrap")),
        ("go", go),
    ):
        if found is None:
            return f"'{tool}' is not on PATH"
    image = script_output("build-kind-node-image.sh", "--print-image")
    if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        return f"the node image {image} is not built"
    return None


@pytest.fixture(scope="module")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    """The test cluster; skips when a part is missing, except under CI (env CI set), where it
    fails instead."""
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {missing}: {ENABLE_HINT}")
        pytest.skip(f"{missing}: {ENABLE_HINT}")
    node_dir = Path(script_output("build-kind-node-image.sh", "--print-dir"))
    cluster = KindCluster(
        kind=Path(script_output("install-kind.sh")),
        kubectl_path=node_dir / "bin" / "kubectl",
        image=script_output("build-kind-node-image.sh", "--print-image"),
        workdir=tmp_path_factory.mktemp("kind"),
    )
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.delete()
