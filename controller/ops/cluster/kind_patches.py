"""A host's patches to a kind config, merged into a copy of ``kind/cluster.yaml``: the user's file
is never edited. ``kind/host/cluster-patches.yaml`` holds the patches the project's CI host needs
(see kind/README.md, "Host patches").

Merge rule: mappings merge key by key, lists append (kind's ``containerdConfigPatches`` and
``kubeadmConfigPatches`` are lists), a scalar replaces. ``nodes`` may not be patched: appending
would add nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.errors import OpsError
from controller.ops.repository import ROOT as REPO

CI_HOST_PATCHES = REPO / "kind" / "host" / "cluster-patches.yaml"
"""The patches of the project's CI host (cgroup v1, a loaded 2-core machine)."""
CI_CONTAINERS_CONF = REPO / "kind" / "host" / "containers.conf"
"""Podman's ulimits for kind's nodes there, passed as ``CONTAINERS_CONF``."""


class KindPatchRefused(OpsError):
    """A patch file that cannot be merged into a kind config."""

    reason = "kind-patch-refused"


def read_patches(path: Path) -> dict[str, Any]:
    """The patches in ``path``: one YAML mapping without ``nodes``."""
    import yaml  # type: ignore[import-untyped]

    try:
        patches = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise KindPatchRefused(
            f"cannot read the kind patches {path}: {error}",
            next_step="give a readable YAML file (see kind/host/cluster-patches.yaml)",
        ) from error
    if not isinstance(patches, dict):
        raise KindPatchRefused(
            f"the kind patches {path} are not a YAML mapping",
            next_step="write the patches as top-level kind config keys",
        )
    if "nodes" in patches:
        raise KindPatchRefused(
            f"the kind patches {path} patch `nodes`, which would add nodes",
            next_step="patch every node through kubeadmConfigPatches or containerdConfigPatches",
        )
    return patches


def merged(config: Any, patch: Any) -> Any:
    """``config`` with ``patch`` merged in (mappings by key, lists appended)."""
    if isinstance(config, dict) and isinstance(patch, dict):
        out = dict(config)
        for key, value in patch.items():
            out[key] = merged(config[key], value) if key in config else value
        return out
    if isinstance(config, list) and isinstance(patch, list):
        return [*config, *patch]
    return patch


def patched_config(config_text: str, patches: Path) -> str:
    """The kind config ``config_text`` with the patches of ``patches`` merged in."""
    import yaml

    config = yaml.safe_load(config_text)
    return str(yaml.safe_dump(merged(config, read_patches(patches)), sort_keys=False))
