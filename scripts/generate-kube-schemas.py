#!/usr/bin/env python3
"""Regenerate schemas/kubernetes/ from the pinned test control plane: starts it (building it
first if needed), reads the kube-apiserver's /openapi/v2 and the pinned CRDs, writes the files.

Usage: PYTHONPATH=$PWD .venv/bin/python scripts/generate-kube-schemas.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "kubernetes")]

from controlplane import ControlPlane, build_control_plane  # noqa: E402

from controller.ops.checks import kube_schemas  # noqa: E402


def main() -> int:
    build = build_control_plane()
    with ControlPlane(build, nodes=0, kueue=False, agent_sandbox=False) as plane:
        schemas = kube_schemas.generate(
            kube_schemas.fetch_openapi_v2(plane.api_client()),
            kube_schemas.crd_files(build.manifest_dir),
        )
    kube_schemas.write(schemas)
    print(f"wrote {len(schemas)} schemas to {kube_schemas.SCHEMA_DIR.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
