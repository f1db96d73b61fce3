"""The committed schemas/kubernetes/ are what the pinned apiserver and CRDs generate today: a
version bump, or a change to the generator, fails here until the files are regenerated."""

from __future__ import annotations

import difflib
import json

from kind_kwok import KwokPlane

from controller.ops.checks import kube_schemas


def test_the_committed_schemas_match_the_pinned_control_planes_openapi_and_crds(
    control_plane: KwokPlane,
) -> None:
    generated = kube_schemas.generate(
        kube_schemas.fetch_openapi_v2(control_plane.api_client()),
        kube_schemas.crd_files(control_plane.manifest_dir),
    )
    fresh = {path: kube_schemas.render(schema) for path, schema in generated.items()}
    committed = kube_schemas.committed()
    assert sorted(fresh) == sorted(committed), "regenerate with scripts/generate-kube-schemas.py"
    for path, text in fresh.items():
        if text != committed[path]:
            diff = "".join(
                list(
                    difflib.unified_diff(
                        committed[path].splitlines(True), text.splitlines(True), path, "generated"
                    )
                )[:40]
            )
            raise AssertionError(
                f"{path} drifted from the pinned control plane; regenerate with "
                f"scripts/generate-kube-schemas.py:\n{diff}"
            )  # fmt: skip


def test_every_validated_kind_has_a_strict_schema_that_pins_its_api_version_and_kind() -> None:
    committed = kube_schemas.committed()
    for api_version, kind in kube_schemas.VALIDATED_KINDS:
        schema = json.loads(committed[kube_schemas.schema_path(api_version, kind)])
        assert schema["properties"]["apiVersion"]["enum"] == [api_version]
        assert schema["properties"]["kind"]["enum"] == [kind]
        assert schema["additionalProperties"] is False
