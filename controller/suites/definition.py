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
from controller.run.spec import (
    ROSTER_NAME,
    NotAPythonModule,
    RunSpec,
    RunSpecError,
    exec_module_file,
)

SUITE_NAME = "suite"
SUITE_ID = re.compile(r"^[a-z][a-z0-9.-]{0,62}$")
TIE = "tie"
"""What a pairs grader's result field may hold (besides ``None``) when nobody won."""

Matchups = Literal["single", "pairs", "round-robin", "replicates"]
Ranking = Literal["bradley-terry", "score"]
Build = Callable[[Mapping[str, Any]], RunSpec]
Settings = Callable[[Mapping[str, Any]], Mapping[str, Any]]
TWIN = "-twin"
"""A self-play run's second seat is the competitor's name with this suffix (roster names differ)."""


class SuiteError(SocietyError):
    """A suite definition, its module or its artifacts are not valid; ``reason`` is stable."""

    reason = "suite-invalid"


@dataclass(frozen=True, slots=True)
class Slot:
    """One run of the suite: who takes part (in order) and the seed."""

    competitors: tuple[str, ...]
    seed: int

    @property
    def seats(self) -> tuple[str, ...]:
        """The roster names: the competitors, a self-play run's second seat as ``<name>-twin``."""
        if len(self.competitors) == 2 and self.competitors[0] == self.competitors[1]:
            return (self.competitors[0], self.competitors[0] + TWIN)
        return self.competitors

    @property
    def self_play(self) -> bool:
        return len(self.seats) != len(set(self.competitors))

    def competitor_of(self, seat: str) -> str:
        return seat.removesuffix(TWIN) if self.self_play else seat

    @property
    def matchup(self) -> str:
        """``a`` or ``a.b``: competitor names never hold a dot, so the key is unambiguous."""
        return ".".join(self.competitors)

    @property
    def key(self) -> str:
        return f"{self.matchup}/seed-{self.seed}"


REPLICATE = "replicate"
"""The one competitor of a ``replicates`` suite defined without competitors."""


@dataclass(frozen=True, eq=False)
class Suite:
    """Competitors, a ``build`` that makes the RunSpec for those taking part, matchups, seeds, and
    the grader module (a path, relative to the suite module) with the result field that scores
    (``single``), names the winner (``pairs``, ``round-robin``), or, with ``ranking="score"``,
    maps each seat to its payoff."""

    id: str
    competitors: Mapping[str, Any]
    build: Build
    matchups: Matchups
    seeds: tuple[int, ...]
    grader: Path
    result: str
    ranking: Ranking = "bradley-terry"
    self_play: bool = False
    settings: Settings | None = None
    """Given the same competitors as ``build``, the run's RunSpec parameters (``--set`` values)."""
    source: Path | None = None
    """The module that defined the suite, once ``load_suite`` loaded it."""

    @classmethod
    def define(
        cls,
        *,
        id: str,
        competitors: Mapping[str, Any] | None = None,
        build: Build,
        matchups: Matchups,
        seeds: Iterable[int],
        grader: str | Path,
        result: str = "",
        ranking: Ranking = "bradley-terry",
        self_play: bool = False,
        settings: Settings | None = None,
    ) -> Suite:
        """Check and freeze a suite; raises ``SuiteError``. ``settings``, given the competitors
        of one run as ``build`` is, returns that run's RunSpec parameters: each run is started
        with them as ``--set`` values, so its ledger records them (``RunStarted.parameters``).

        ``matchups="replicates"`` runs each competitor (one, ``replicate``, when none are given)
        once per seed and ranks nothing: ``suite.json`` summarizes each numeric field of the
        grader's output over the seeds (mean and bootstrap interval); ``result`` is not used."""
        if competitors is None and matchups == "replicates":
            competitors = {REPLICATE: None}
        if not isinstance(id, str) or not SUITE_ID.match(id):
            raise SuiteError(
                f"suite id {id!r} must match {SUITE_ID.pattern}, e.g. 'negotiation-v1' (it names "
                f"the suite's folder under --artifacts)",
                reason="bad-id",
            )
        roster = _check_competitors(competitors, matchups)
        _check_ranking(matchups, ranking, self_play, roster)
        if not callable(build) or inspect.iscoroutinefunction(build):
            raise SuiteError(
                "build must be a plain function taking the competitors of one run (name -> "
                "parameters) and returning its RunSpec",
                reason="bad-build",
            )
        if settings is not None and (
            not callable(settings) or inspect.iscoroutinefunction(settings)
        ):
            raise SuiteError(
                "settings must be a plain function taking the competitors of one run (as build "
                "does) and returning its RunSpec parameters, e.g. {'patience': 3}",
                reason="bad-settings",
            )
        chosen = tuple(seeds)
        if not chosen or any(type(seed) is not int or seed < 0 for seed in chosen):
            raise SuiteError(
                f"seeds must be one or more non-negative integers, got {chosen!r}",
                reason="bad-seeds",
            )
        if len(set(chosen)) != len(chosen):
            raise SuiteError(f"seeds {chosen!r} repeat a seed", reason="bad-seeds")
        if matchups != "replicates" and (not isinstance(result, str) or not result):
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
            ranking=ranking,
            self_play=self_play,
            settings=settings,
        )

    def slots(self) -> list[Slot]:
        """Every run: per matchup, per seed, in a fixed order."""
        names = list(self.competitors)
        if self.matchups in ("single", "replicates"):
            lineups: list[tuple[str, ...]] = [(name,) for name in names]
        elif self.matchups == "pairs":
            lineups = list(itertools.permutations(names, 2))
        else:  # each unordered pair once, seated in the order the competitors were given
            pairs = (
                itertools.combinations_with_replacement
                if self.self_play
                else itertools.combinations
            )
            lineups = list(pairs(names, 2))
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
        spec = self.build(self._taking_part(names))
        if not isinstance(spec, RunSpec):
            raise SuiteError(
                f"build({', '.join(names)}) returned {type(spec).__name__}, not a RunSpec; "
                f"return RunSpec.define(...)",
                reason="bad-build",
            )
        return spec

    def settings_for(self, competitors: Iterable[str]) -> dict[str, Any]:
        """The RunSpec parameters of these competitors' run (empty without ``settings``),
        checked against the parameters the run's spec declares."""
        names = tuple(competitors)
        if self.settings is None:
            return {}
        chosen = self.settings(self._taking_part(names))
        if not isinstance(chosen, Mapping) or not all(isinstance(key, str) for key in chosen):
            raise SuiteError(
                f"settings({', '.join(names)}) returned {type(chosen).__name__}, not a mapping "
                f"of parameter names to values",
                reason="bad-settings",
            )
        values = dict(chosen)
        try:
            self.run_spec_for(names).parameters_from(values)
        except RunSpecError as exc:
            raise SuiteError(
                f"settings({', '.join(names)}): {exc}", reason="bad-settings"
            ) from None
        return values

    def _taking_part(self, names: tuple[str, ...]) -> Mapping[str, Any]:
        seats = Slot(names, 0).seats
        return MappingProxyType(
            {seat: self.competitors[name] for seat, name in zip(seats, names, strict=True)}
        )

    def grader_path(self) -> Path:
        """The grader module, resolved against the suite module's folder."""
        if self.grader.is_absolute() or self.source is None:
            return self.grader.resolve()
        return (self.source.parent / self.grader).resolve()

    def __repr__(self) -> str:
        names = list(self.competitors)
        return f"Suite(id={self.id!r}, matchups={self.matchups!r}, competitors={names})"


def _check_competitors(competitors: Mapping[str, Any] | None, matchups: str) -> Mapping[str, Any]:
    if matchups not in ("single", "pairs", "round-robin", "replicates"):
        raise SuiteError(
            f"matchups must be 'single' (one competitor per run, ranked by score), 'pairs' "
            f"(every ordered pair meets once per seed), 'round-robin' (every unordered pair "
            f"once per seed) or 'replicates' (each competitor once per seed, summarized, not "
            f"ranked), got {matchups!r}",
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
    if matchups in ("pairs", "round-robin") and len(competitors) < 2:
        raise SuiteError(f"{matchups!r} needs at least two competitors", reason="bad-competitors")
    return MappingProxyType(dict(competitors))


def _check_ranking(
    matchups: str, ranking: str, self_play: bool, competitors: Mapping[str, Any]
) -> None:
    if ranking not in ("bradley-terry", "score"):
        raise SuiteError(
            f"ranking must be 'bradley-terry' (the result field names the winner) or 'score' "
            f"(it maps each seat to its payoff; competitors ranked by total), got {ranking!r}",
            reason="bad-ranking",
        )
    if matchups in ("single", "replicates") and ranking != "bradley-terry":
        raise SuiteError(
            f"{matchups!r} suites take no ranking= (a score field ranks 'single', 'replicates' "
            "ranks nothing); ranking= is for pairs",
            reason="bad-ranking",
        )
    if self_play and matchups != "round-robin":
        raise SuiteError(
            "self_play=True needs matchups='round-robin' (each competitor meets its twin once per "
            "seed)",
            reason="bad-self-play",
        )
    too_long = [name for name in competitors if self_play and len(name) + len(TWIN) > 63]
    if too_long:
        raise SuiteError(
            f"competitor {too_long[0]!r} is too long for self-play: its twin seat "
            f"{too_long[0] + TWIN!r} must be a roster name of at most 63 characters",
            reason="bad-competitor-name",
        )


def load_suite(path: str | Path) -> Suite:
    """Import the module at ``path`` and return its one module-level ``suite``."""
    module_path = Path(path).resolve()
    if not module_path.is_file():
        raise SuiteError(
            f"no suite module at {module_path} that this process can read; pass SUITE.py, or, "
            f"where a module loads it (a suite's generated matchup module), let the module's "
            f"sandbox read its folder: society run MODULE.py --include {module_path.parent}",
            reason="module-not-found",
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
