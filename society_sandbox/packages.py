"""The Python packages an agent program declares it needs, checked against an environment.

A requirement is PEP 508 text (``"numpy>=1.26"``, ``"scipy"``, ``"rich[jupyter]~=13.0"``). The
check reads installed distributions' metadata; it never imports them. Without ``packaging`` (an
environment too bare to hold it), names are checked and versions are not.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


class BadRequirement(ValueError):
    """Not a PEP 508 requirement; the message says why."""


@dataclass(frozen=True, slots=True)
class Unmet:
    """A requirement the environment does not satisfy, and the version it has instead."""

    requirement: str
    installed: str | None

    def __str__(self) -> str:
        found = "not installed" if self.installed is None else f"{self.installed} installed"
        return f"{self.requirement} ({found})"


def check_requirement(text: str) -> None:
    """Raise ``BadRequirement`` unless ``text`` is one PEP 508 requirement."""
    _parse(text)


def unmet(requirements: Iterable[str], path: Sequence[str] | None = None) -> list[Unmet]:
    """The requirements that the distributions on ``path`` (default: ``sys.path``) do not meet;
    one whose environment marker rules this interpreter out is met."""
    missing = []
    for text in requirements:
        name, accepts = _parse(text)
        if accepts is None:
            continue
        found = next(iter(_distributions(name, path)), None)
        if found is None or not accepts(found.version):
            missing.append(Unmet(text, None if found is None else found.version))
    return missing


def _distributions(
    name: str, path: Sequence[str] | None
) -> Iterable[importlib.metadata.Distribution]:
    if path is None:
        return importlib.metadata.distributions(name=name)
    return importlib.metadata.distributions(name=name, path=list(path))


def _parse(text: str) -> tuple[str, Callable[[str], bool] | None]:
    """The distribution's name and a test of an installed version (``None``: the requirement's
    marker rules this interpreter out)."""
    if not isinstance(text, str) or not text.strip():
        raise BadRequirement(f"{text!r} is not a requirement such as 'numpy>=1.26'")
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        match = _NAME.match(text)
        if match is None:
            raise BadRequirement(f"{text!r} names no distribution") from None
        return match.group(1), lambda version: True
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadRequirement(f"{text!r} is not a PEP 508 requirement: {reason}") from None
    if requirement.url:
        raise BadRequirement(f"{text!r} names a URL; name a distribution and its versions")
    if requirement.marker is not None and not requirement.marker.evaluate():
        return requirement.name, None
    specifier = requirement.specifier
    return requirement.name, lambda version: specifier.contains(version, prereleases=True)
