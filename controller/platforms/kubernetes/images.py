"""The image map: which digest-pinned image each image name stands for on a cluster.

``scripts/build-images.sh`` builds the runtime, controller and worker images and writes a map,
``{"images": {"society/scripted:dev": "localhost/society/scripted@sha256:...", ...}}``; a team
that pushes its images writes the same shape with its registry's references. Cluster runs
resolve runtime images through it at submit time, so a roster written with
``society/scripted:dev`` runs the image built from that tree, pinned by digest. No digest is
written into the code that goes into an image.

``SOCIETY_IMAGE_MAP`` names the map: a path to the JSON file, or the JSON itself (how the
controller Job receives it). An image that is already pinned is left as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import controller.settings as s
from controller.run.platform import PlatformError

PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
CONTROLLER_IMAGE = "society/controller:dev"
"""The name the controller Job's image has in the map (``SOCIETY_CONTROLLER_IMAGE`` wins)."""


def pinned(image: str) -> bool:
    return bool(PINNED.match(image))


@dataclass(frozen=True, slots=True)
class ImageMap:
    """Image name -> ``name@sha256:digest``; empty when no map is configured."""

    images: Mapping[str, str] = field(default_factory=dict)
    source: str = ""
    """Where the map came from (a path, or ``SOCIETY_IMAGE_MAP``), for messages."""

    @classmethod
    def parse(cls, value: str | None) -> ImageMap:
        """The map ``SOCIETY_IMAGE_MAP`` names: JSON text, or a path to a JSON file."""
        if not value:
            return cls()
        text, source = value, s.IMAGE_MAP.name
        if not value.lstrip().startswith("{"):
            source = value
            try:
                text = Path(value).read_text()
            except OSError as exc:
                raise PlatformError(
                    f"cannot read the image map {value}: {exc.strerror}; run "
                    f"scripts/build-images.sh (it prints the map's path) or unset "
                    f"SOCIETY_IMAGE_MAP",
                    reason="image-map-unreadable",
                ) from None
        try:
            data = json.loads(text)
            images = data.get("images", data) if isinstance(data, dict) else None
            if not isinstance(images, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in images.items()
            ):
                raise ValueError("expected {'images': {name: ref@sha256:digest}}")
        except ValueError as exc:
            raise PlatformError(
                f"the image map from {source} is not valid: {exc}", reason="image-map-invalid"
            ) from None
        unpinned = sorted(name for name, ref in images.items() if not pinned(ref))
        if unpinned:
            raise PlatformError(
                f"the image map from {source} maps {unpinned[0]!r} to "
                f"{images[unpinned[0]]!r}, which is not pinned by digest (name@sha256:...)",
                reason="image-map-unpinned",
            )
        return cls(dict(images), source)

    def resolve(self, image: str) -> str:
        """``image`` pinned by digest through the map; unchanged when pinned or not mapped."""
        if pinned(image):
            return image
        return self.images.get(image, image)

    def to_json(self) -> str:
        return json.dumps({"images": dict(self.images)}, sort_keys=True, separators=(",", ":"))
