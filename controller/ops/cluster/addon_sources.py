"""``cluster up --addons-from-source``: the registry, Kueue and Agent Sandbox built here from the
Go module proxy by ``scripts/build-kind-addon-images.sh`` (for a machine that reaches no image
registry), their images pushed to the local registry and the manifests applied with only their
image references mapped to the pushed digests."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.ops.cluster import images
from controller.ops.cluster.kind import sandbox_flags
from controller.ops.cluster.steps import StepFailed
from controller.ops.repository import ROOT as REPO

BUILD_SCRIPT = REPO / "scripts" / "build-kind-addon-images.sh"
SANDBOX_DEPLOYMENT = "agent-sandbox-controller"


@dataclass(frozen=True, slots=True)
class AddonImage:
    """One add-on as built: its local image, that image's digest, its rendered manifest."""

    image: str
    digest: str
    manifest: Path
    version: str


@dataclass(frozen=True, slots=True)
class AddonBuild:
    """``build-kind-addon-images.sh``'s ``addons.json``."""

    registry_image: str
    addons: dict[str, AddonImage]

    @classmethod
    def load(cls, path: Path) -> AddonBuild:
        data = json.loads(path.read_text())
        addons = {
            name: AddonImage(item["image"], item["digest"], Path(item["manifest"]), item["version"])
            for name, item in data["addons"].items()
        }
        return cls(f"{data['registry']['image']}", addons)


def build_addons(script: Path = BUILD_SCRIPT) -> AddonBuild:
    """Run the build script (seconds when cached)."""
    needs = "it needs Go, podman and the node image's kubectl: scripts/build-kind-node-image.sh"
    built = images.run_build_script(script, needs=needs, reason="addon-build-failed")
    return AddonBuild.load(built)


def pushed_manifest(
    engine: Path, registry: str, addon: str, built: AddonImage, out_dir: Path
) -> Path:
    """Push the add-on's image to ``registry`` and write its manifest with the image pinned
    there (and, for Agent Sandbox, ``kind.sandbox_flags()``); returns the file."""
    repository = built.image.split(":", 1)[0].removeprefix("localhost/")
    target = f"{registry}/{repository}:{built.version}"
    pinned = images.push_image(engine, built.image, target)
    subprocess.run([str(engine), "rmi", target], capture_output=True, check=False)  # the tag only
    text = built.manifest.read_text()
    if f"image: {built.image}\n" not in text:
        raise StepFailed(
            f"{built.manifest} names no image {built.image}; rebuild it with {BUILD_SCRIPT.name}",
            reason="addon-build-failed",
        )
    text = text.replace(f"image: {built.image}\n", f"image: {pinned}\n")
    if addon == "agent-sandbox":
        text = with_sandbox_flags(text)
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = out_dir / f"{addon}-{built.version}.yaml"
    path.write_text(text)
    return path


def with_sandbox_flags(text: str) -> str:
    """The Agent Sandbox controller's Deployment with ``kind.sandbox_flags()`` in its arguments,
    set in the manifest (so a second apply changes nothing)."""
    import yaml  # type: ignore[import-untyped]

    documents: list[Any] = [d for d in yaml.safe_load_all(text) if d]
    for document in documents:
        if document.get("kind") == "Deployment" and (
            document["metadata"]["name"] == SANDBOX_DEPLOYMENT
        ):
            container = document["spec"]["template"]["spec"]["containers"][0]
            container["args"] = [*container.get("args", []), *sandbox_flags()]
    return str(yaml.safe_dump_all(documents, sort_keys=False))
