#!/usr/bin/env python3
"""Regenerate schemas/kubernetes/ from the pinned test cluster: starts the kind test cluster
(building the project's images first if needed; root, podman), reads its kube-apiserver's
/openapi/v2 and the pinned Kueue and Agent Sandbox CRDs, writes the files, deletes the cluster.

Usage: sudo .venv/bin/python scripts/generate-kube-schemas.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "kubernetes")]

from cp_build import build_control_plane, build_images  # noqa: E402
from cp_images import Images  # noqa: E402
from kind_plane import KindPlane  # noqa: E402

from controller.ops.checks import kube_schemas  # noqa: E402


def main() -> int:
    with KindPlane(Images.load(build_images()), name="society-kind-schemas") as plane:
        schemas = kube_schemas.generate(
            kube_schemas.fetch_openapi_v2(plane.api_client()),
            kube_schemas.crd_files(build_control_plane() / "manifests"),
        )
    kube_schemas.write(schemas)
    print(f"wrote {len(schemas)} schemas to {kube_schemas.SCHEMA_DIR.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
