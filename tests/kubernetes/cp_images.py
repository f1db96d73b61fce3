"""The image map of scripts/build-images.sh as the tests read it."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Images:
    """The image map of scripts/build-images.sh: name -> ref@digest, and each ref's archive."""

    path: Path
    images: dict[str, str]
    archives: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> Images:
        data = json.loads(path.read_text())
        return cls(path, dict(data["images"]), dict(data["archives"]))

    def ref(self, name: str) -> str:
        return self.images[name if ":" in name else f"society/{name}:dev"]

    def snapshot(self, directory: Path) -> Images:
        """This map and its archives as of now, under ``directory``: a later
        scripts/build-images.sh (another worktree's, or a changed tree's) replaces the shared
        map and archives, and a running node must keep resolving to what it imported. The
        archives are hard links (the build renames new ones into place), copies across
        filesystems."""
        directory.mkdir(parents=True, exist_ok=True)
        archives = {}
        for ref, source in self.archives.items():
            target = directory / Path(source).name
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
            archives[ref] = str(target)
        path = directory / "images.json"
        path.write_text(json.dumps({"images": self.images, "archives": archives}, indent=2))
        return Images(path, dict(self.images), archives)
