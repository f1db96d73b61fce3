"""Bradley-Terry strengths from pairwise results, and bootstrap intervals over seeds.

The model: competitor ``i`` beats ``j`` with probability ``1 / (1 + exp(s_j - s_i))``. The fit is
the maximum a posteriori strength under a Gaussian prior on every ``s`` (penalty ``PRIOR * s²``),
so an undefeated competitor still gets a finite strength; a tie counts as half a win for each
side. Newton's method on that strictly convex objective; the strengths come out centred on 0.

Everything is plain Python floats in a fixed order and the published numbers are rounded to
``DECIMALS`` places, so a recompute on the same evidence gives the same bytes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PRIOR = 0.1
"""Penalty weight on each squared strength: a Gaussian prior with variance 1 / (2 * PRIOR)."""
DECIMALS = 3
BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 20240917
INTERVAL = 0.95
_MAX_NEWTON_STEPS = 100
_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True)
class Game:
    """One pairwise result on one seed: ``winner`` is ``None`` for a tie."""

    first: str
    second: str
    seed: int
    winner: str | None


def win_matrix(names: Sequence[str], games: Iterable[Game]) -> list[list[float]]:
    """``w[i][j]``: how often ``names[i]`` beat ``names[j]``; a tie adds one half to each side."""
    index = {name: i for i, name in enumerate(names)}
    wins = [[0.0] * len(names) for _ in names]
    for game in games:
        i, j = index[game.first], index[game.second]
        if game.winner is None:
            wins[i][j] += 0.5
            wins[j][i] += 0.5
        elif game.winner == game.first:
            wins[i][j] += 1.0
        else:
            wins[j][i] += 1.0
    return wins


def fit_strengths(wins: Sequence[Sequence[float]], *, prior: float = PRIOR) -> list[float]:
    """Minimise ``prior * sum(s²) + sum_ij w_ij * log(1 + exp(s_j - s_i))`` by Newton steps."""
    n = len(wins)
    strengths = [0.0] * n
    for _ in range(_MAX_NEWTON_STEPS):
        gradient = [2.0 * prior * s for s in strengths]
        hessian = [[0.0] * n for _ in range(n)]
        for i in range(n):
            hessian[i][i] = 2.0 * prior
        for i in range(n):
            for j in range(i + 1, n):
                games = wins[i][j] + wins[j][i]
                if games == 0.0:
                    continue
                p = _sigmoid(strengths[i] - strengths[j])  # P(i beats j)
                pull = games * p - wins[i][j]
                gradient[i] += pull
                gradient[j] -= pull
                curvature = games * p * (1.0 - p)
                hessian[i][i] += curvature
                hessian[j][j] += curvature
                hessian[i][j] -= curvature
                hessian[j][i] -= curvature
        step = _solve(hessian, gradient)
        strengths = [s - d for s, d in zip(strengths, step, strict=True)]
        if max((abs(d) for d in step), default=0.0) < _TOLERANCE:
            break
    return strengths


@dataclass(frozen=True, slots=True)
class Rating:
    name: str
    strength: float
    low: float
    high: float
    wins: int
    losses: int
    ties: int

    def as_json(self) -> dict[str, object]:
        return {
            "strength": self.strength,
            "interval": [self.low, self.high],
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
        }


def rate(names: Sequence[str], games: Sequence[Game]) -> list[Rating]:
    """Strengths with bootstrap intervals (resampling seeds), best first, equal strengths in name
    order (``shared_ranks`` gives them one rank). With fewer than two seeds no interval can be
    estimated: ``low`` and ``high`` are then the strength itself (``estimable_interval`` False)."""
    strengths = fit_strengths(win_matrix(names, games))
    by_seed: dict[int, list[Game]] = {}
    for game in games:
        by_seed.setdefault(game.seed, []).append(game)
    seeds = sorted(by_seed)
    rng = random.Random(BOOTSTRAP_SEED)
    samples: list[list[float]] = [[] for _ in names]
    for _ in range(BOOTSTRAP_SAMPLES if len(seeds) > 1 else 0):
        drawn = [seeds[rng.randrange(len(seeds))] for _ in seeds]
        resampled = [game for seed in drawn for game in by_seed[seed]]
        for i, value in enumerate(fit_strengths(win_matrix(names, resampled))):
            samples[i].append(value)
    ratings = []
    for i, name in enumerate(names):
        low, high = percentile_interval(samples[i]) if samples[i] else (strengths[i],) * 2
        record = _record(name, games)
        ratings.append(Rating(name, _round(strengths[i]), _round(low), _round(high), *record))
    return sorted(ratings, key=lambda rating: (-rating.strength, rating.name))


def shared_ranks(values: Sequence[float]) -> list[int]:
    """Competition ranks, best (largest) first: equal values share a rank (1, 1, 3)."""
    return [1 + sum(1 for other in values if other > value) for value in values]


def estimable_interval(seeds: Iterable[int]) -> bool:
    """A bootstrap over seeds says something only when there are at least two seeds."""
    return len(set(seeds)) > 1


NO_INTERVAL = "one seed: no interval can be estimated (run more seeds)"


@dataclass(frozen=True, slots=True)
class Total:
    """A competitor's total payoff over every game it played, with a bootstrap interval."""

    name: str
    total: float
    low: float
    high: float
    games: int


def rank_totals(names: Sequence[str], payoffs: Sequence[tuple[str, int, float]]) -> list[Total]:
    """Totals of ``(competitor, seed, points)`` (one entry per competitor per game), best first,
    equal totals in name order; the interval resamples seeds (all games of a drawn seed)."""
    per_seed: dict[str, dict[int, list[float]]] = {name: {} for name in names}
    for name, seed, points in payoffs:
        per_seed[name].setdefault(seed, []).append(points)
    sums = {name: {s: math.fsum(p) for s, p in seeds.items()} for name, seeds in per_seed.items()}
    seeds = sorted({seed for _, seed, _ in payoffs})
    rng = random.Random(BOOTSTRAP_SEED)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(BOOTSTRAP_SAMPLES if len(seeds) > 1 else 0):
        drawn = [seeds[rng.randrange(len(seeds))] for _ in seeds]
        for name in names:
            samples[name].append(math.fsum(sums[name].get(seed, 0.0) for seed in drawn))
    totals = []
    for name in names:
        total = math.fsum(sums[name].values())
        low, high = percentile_interval(samples[name]) if samples[name] else (total, total)
        games = sum(len(points) for points in per_seed[name].values())
        totals.append(Total(name, _round(total), _round(low), _round(high), games))
    return sorted(totals, key=lambda row: (-row.total, row.name))


def percentile_interval(values: Iterable[float]) -> tuple[float, float]:
    """The central ``INTERVAL`` of ``values`` by nearest rank."""
    ordered = sorted(values)
    tail = (1.0 - INTERVAL) / 2.0
    last = len(ordered) - 1
    return ordered[math.floor(tail * last)], ordered[math.ceil((1.0 - tail) * last)]


def mean_interval(scores_by_seed: Mapping[int, float]) -> tuple[float, float, float]:
    """A competitor's mean score with a bootstrap interval over its seeds (``single``)."""
    seeds = sorted(scores_by_seed)
    values = [scores_by_seed[seed] for seed in seeds]
    mean = math.fsum(values) / len(values)
    rng = random.Random(BOOTSTRAP_SEED)
    means = []
    for _ in range(BOOTSTRAP_SAMPLES):
        drawn = [values[rng.randrange(len(values))] for _ in values]
        means.append(math.fsum(drawn) / len(drawn))
    low, high = percentile_interval(means)
    return _round(mean), _round(low), _round(high)


def _record(name: str, games: Iterable[Game]) -> tuple[int, int, int]:
    wins = losses = ties = 0
    for game in games:
        if name not in (game.first, game.second):
            continue
        if game.winner is None:
            ties += 1
        elif game.winner == name:
            wins += 1
        else:
            losses += 1
    return wins, losses, ties


def _round(value: float) -> float:
    rounded = round(value, DECIMALS)
    return 0.0 if rounded == 0 else rounded  # never publish -0.0


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the Hessian is positive definite)."""
    n = len(vector)
    a = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            if factor:
                for c in range(col, n + 1):
                    a[r][c] -= factor * a[col][c]
    solution = [0.0] * n
    for r in range(n - 1, -1, -1):
        total = a[r][n] - sum(a[r][c] * solution[c] for c in range(r + 1, n))
        solution[r] = total / a[r][r]
    return solution
