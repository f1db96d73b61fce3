"""A RunSpec module as content: what a submitter sends a run worker that is not on its machine.

A cluster run's worker never reads a path it is given: the submitter reads its module and sends
the text with its SHA-256, the worker publishes exactly that text to the run's controller, and
the controller checks the digest before it imports anything. Only that one file travels, so a
module that imports a module beside it (which ``society run`` on the local profile allows, as
``python MODULE.py`` does) is refused here, before anything is submitted.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import re
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from controller.run.platform import PlatformError

MODULE_LIMIT = 512 * 1024
"""The largest module a cluster run carries (a ConfigMap holds at most 1 MiB; Temporal payloads
2 MiB, and the request travels twice)."""
MODULE_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.py$"
"""A file name that is also a ConfigMap key, with no path in it."""


class ModuleSourceError(PlatformError):
    """The module's content cannot travel, or does not match its digest."""

    reason = "module-source-invalid"


def sibling_imports(module: Path, content: str) -> list[str]:
    """The top-level modules ``content`` imports (anywhere in it: at load or inside a function)
    that only the module's own folder provides, not this interpreter's environment."""
    try:
        tree = ast.parse(content, filename=module.name)
    except (SyntaxError, ValueError):
        return []  # loading it fails first, and says where
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    folder = module.resolve().parent
    environment = [entry for entry in sys.path if Path(entry or ".").resolve() != folder]
    return sorted(
        name
        for name in names - {module.stem, *sys.builtin_module_names}
        if importlib.machinery.PathFinder.find_spec(name, [str(folder)]) is not None
        and importlib.machinery.PathFinder.find_spec(name, environment) is None
    )


def digest(content: str) -> str:
    """The lowercase hex SHA-256 of ``content``'s UTF-8 bytes."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class ModuleSource(BaseModel):
    """The module's file name, its text and that text's SHA-256 (lowercase hex)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=MODULE_NAME)
    content: str = Field(max_length=MODULE_LIMIT)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @classmethod
    def read(cls, path: str | Path) -> ModuleSource:
        """The module at ``path`` (on the submitter's machine) as content."""
        module = Path(path)
        if re.match(MODULE_NAME, module.name) is None:
            raise ModuleSourceError(
                f"{module.name!r} cannot name a cluster run's module: use letters, digits, "
                f"'_', '-' or '.' and end in .py",
                reason="module-name-invalid",
            )
        data = module.read_bytes()
        if len(data) > MODULE_LIMIT:
            raise ModuleSourceError(
                f"{module} is {len(data)} bytes; a cluster run carries at most {MODULE_LIMIT}: "
                f"move data out of the module (into an image or a volume)",
                reason="module-too-large",
            )
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ModuleSourceError(
                f"{module} is not UTF-8 text", reason="module-not-text"
            ) from None
        siblings = sibling_imports(module, content)
        if siblings:
            shown = ", ".join(siblings)
            raise ModuleSourceError(
                f"{module.name} imports {shown} from its own folder ({module.resolve().parent}), "
                f"and a cluster run carries only the text of {module.name} itself, not the files "
                f"beside it: copy what it needs from {shown} into {module.name}, or install "
                f"{shown} as a package in the controller image; the local profile (--profile "
                f"local, without --task-queue) imports modules beside it",
                reason="module-imports-sibling",
            )
        return cls(name=module.name, content=content, sha256=digest(content))

    def verified(self) -> str:
        """The content, once it matches its digest; raises ``ModuleSourceError`` otherwise."""
        if digest(self.content) != self.sha256:
            raise ModuleSourceError(
                f"the content of {self.name} does not match its SHA-256 {self.sha256}; "
                f"submit the run again",
                reason="module-digest-mismatch",
            )
        return self.content
