"""``Suite``: many runs of one experiment across competitors and seeds, graded and ranked.

A suite module defines one module-level ``suite`` made by ``Suite.define``, in the style of
``RunSpec.define``: everything is checked when the module loads, before any run starts.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from controller.errors import SocietyError
from controller.run.spec import ROSTER_NAME, NotAPythonModule, RunSpec, exec_module_file

SUITE_NAME = "suite"
SUITE_ID = re.compile(r"^[a-z][a-z0-9.-]{0,62}$")
TIE = "tie"
"""What a pairs grader's result field may hold (besides ``None``) when nobody won."""

Matchups = Literal["single", "pairs"]
Build = Callable[[Mapping[str, Any]], RunSpec]


class SuiteError(SocietyError):
    """A suite definition, its module or its artifacts are not valid; ``reason`` is stable."""

    reason = "suite-invalid"


@dataclass(frozen=True, slots=True)
class Slot:
    """One run of the suite: who takes part (in order) and the seed."""

    competitors: tuple[str, ...]
    seed: int

    @property
    def matchup(self) -> str:
        """``a`` or ``a.b``: competitor names never hold a dot, so the key is unambiguous."""
        return ".".join(self.competitors)

    @property
    def key(self) -> str:
        return f"{self.matchup}/seed-{self.seed}"


@dataclass(frozen=True, eq=False)
class Suite:
    """Competitors, a ``build`` that makes the RunSpec for those taking part, matchups, seeds, and
    the grader module (a path, relative to the suite module) with the result field that scores
    (``single``) or names the winner (``pairs``)."""

    id: str
    competitors: Mapping[str, Any]
    build: Build
    matchups: Matchups
    seeds: tuple[int, ...]
    grader: Path
    result: str
    source: Path | None = None
    """The module that defined the suite, once ``load_suite`` loaded it."""

    @classmethod
    def define(
        cls,
        *,
        id: str,
        competitors: Mapping[str, Any],
        build: Build,
        matchups: Matchups,
        seeds: Iterable[int],
        grader: str | Path,
        result: str,
    ) -> Suite:
        """Check and freeze a suite; raises ``SuiteError``."""
        if not isinstance(id, str) or not SUITE_ID.match(id):
            raise SuiteError(
                f"suite id {id!r} must match {SUITE_ID.pattern}, e.g. 'negotiation-v1' (it names "
                f"the suite's folder under --artifacts)",
                reason="bad-id",
            )
        roster = _check_competitors(competitors, matchups)
        if not callable(build) or inspect.iscoroutinefunction(build):
            raise SuiteError(
                "build must be a plain function taking the competitors of one run (name -> "
                "parameters) and returning its RunSpec",
                reason="bad-build",
            )
        chosen = tuple(seeds)
        if not chosen or any(type(seed) is not int or seed < 0 for seed in chosen):
            raise SuiteError(
                f"seeds must be one or more non-negative integers, got {chosen!r}",
                reason="bad-seeds",
            )
        if len(set(chosen)) != len(chosen):
            raise SuiteError(f"seeds {chosen!r} repeat a seed", reason="bad-seeds")
        if not isinstance(result, str) or not result:
            raise SuiteError(
                "result must name the field of the grader's output that scores or names the "
                "winner, e.g. result='winner'",
                reason="bad-result-field",
            )
        grader_path = Path(grader)
        if grader_path.suffix != ".py":
            raise SuiteError(
                f"grader {grader!r} must be a Python module path (GRADER.py), relative to the "
                f"suite module",
                reason="bad-grader",
            )
        return cls(
            id=id,
            competitors=roster,
            build=build,
            matchups=matchups,
            seeds=chosen,
            grader=grader_path,
            result=result,
        )

    def slots(self) -> list[Slot]:
        """Every run: per matchup, per seed, in a fixed order."""
        names = list(self.competitors)
        if self.matchups == "single":
            lineups: list[tuple[str, ...]] = [(name,) for name in names]
        else:
            lineups = list(itertools.permutations(names, 2))
        return [Slot(lineup, seed) for lineup in lineups for seed in self.seeds]

    def run_spec_for(self, competitors: Iterable[str]) -> RunSpec:
        """The RunSpec that ``build`` returns for these competitors, checked."""
        names = tuple(competitors)
        unknown = [name for name in names if name not in self.competitors]
        if unknown:
            raise SuiteError(
                f"suite {self.id!r} has no competitor {unknown[0]!r} (it has "
                f"{', '.join(self.competitors)})",
                reason="unknown-competitor",
            )
        spec = self.build(MappingProxyType({name: self.competitors[name] for name in names}))
        if not isinstance(spec, RunSpec):
            raise SuiteError(
                f"build({', '.join(names)}) returned {type(spec).__name__}, not a RunSpec; "
                f"return RunSpec.define(...)",
                reason="bad-build",
            )
        return spec

    def grader_path(self) -> Path:
        """The grader module, resolved against the suite module's folder."""
        if self.grader.is_absolute() or self.source is None:
            return self.grader.resolve()
        return (self.source.parent / self.grader).resolve()

    def __repr__(self) -> str:
        names = list(self.competitors)
        return f"Suite(id={self.id!r}, matchups={self.matchups!r}, competitors={names})"


def _check_competitors(competitors: Mapping[str, Any], matchups: str) -> Mapping[str, Any]:
    if matchups not in ("single", "pairs"):
        raise SuiteError(
            f"matchups must be 'single' (one competitor per run, ranked by score) or 'pairs' "
            f"(every ordered pair meets once per seed), got {matchups!r}",
            reason="bad-matchups",
        )
    if not isinstance(competitors, Mapping) or not competitors:
        raise SuiteError(
            "competitors must map names to parameters, e.g. {'fair': fair_policy}",
            reason="bad-competitors",
        )
    for name in competitors:
        if not isinstance(name, str) or not ROSTER_NAME.match(name) or name == TIE:
            raise SuiteError(
                f"competitor name {name!r} must match {ROSTER_NAME.pattern} and not be "
                f"{TIE!r} (a roster name, so a grader can name the winner)",
                reason="bad-competitor-name",
            )
    if matchups == "pairs" and len(competitors) < 2:
        raise SuiteError("'pairs' needs at least two competitors", reason="bad-competitors")
    return MappingProxyType(dict(competitors))


def load_suite(path: str | Path) -> Suite:
    """Import the module at ``path`` and return its one module-level ``suite``."""
    module_path = Path(path).resolve()
    if not module_path.is_file():
        raise SuiteError(
            f"no suite module at {module_path}; pass SUITE.py", reason="module-not-found"
        )
    digest = hashlib.sha256(str(module_path).encode()).hexdigest()[:12]
    name = f"_society_suite_{module_path.stem.replace('-', '_')}_{digest}"
    loaded = sys.modules.get(name)
    if loaded is None:
        try:
            loaded = exec_module_file(module_path, name)
        except NotAPythonModule as exc:
            raise SuiteError(str(exc), reason="module-not-found") from None
        except SuiteError:
            raise
        except (Exception, SystemExit) as exc:
            summary = "".join(traceback.format_exception_only(exc)).strip()
            raise SuiteError(
                f"importing {module_path} failed: {summary}; fix the module and run again",
                reason="module-import-failed",
            ) from exc
    suite = getattr(loaded, SUITE_NAME, None)
    if not isinstance(suite, Suite):
        raise SuiteError(
            f"{module_path} defines no module-level '{SUITE_NAME}' made by Suite.define(...)",
            reason="no-suite",
        )
    if suite.source is None:
        object.__setattr__(suite, "source", module_path)
    return suite


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
