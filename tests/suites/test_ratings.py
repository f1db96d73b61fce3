"""Bradley-Terry ratings: the fit agrees with choix, ties count half, intervals recompute."""

from __future__ import annotations

import random

import choix
import pytest

from controller.suites.ratings import (
    PRIOR,
    Game,
    fit_strengths,
    mean_interval,
    rate,
    win_matrix,
)

NAMES = ["ada", "bo", "cy", "di"]


def _games(rng: random.Random, count: int) -> list[Game]:
    games = []
    for _ in range(count):
        first, second = rng.sample(NAMES, 2)
        winner = rng.choice([first, second, None])
        games.append(Game(first, second, rng.randrange(5), winner))
    return games


def _choix_strengths(games: list[Game]) -> list[float]:
    """choix has no ties: doubling every game makes a tie one win each way; the doubled
    likelihood needs the doubled penalty for the same optimum."""
    index = {name: i for i, name in enumerate(NAMES)}
    data: list[tuple[int, int]] = []
    for game in games:
        i, j = index[game.first], index[game.second]
        if game.winner is None:
            data += [(i, j), (j, i)]
        elif game.winner == game.first:
            data += [(i, j), (i, j)]
        else:
            data += [(j, i), (j, i)]
    return [float(x) for x in choix.opt_pairwise(len(NAMES), data, alpha=2 * PRIOR, tol=1e-10)]


@pytest.mark.parametrize("seed", range(6))
def test_the_fit_agrees_with_choix_map_estimate_ties_counted_as_half_a_win(seed: int) -> None:
    games = _games(random.Random(seed), 25)
    ours = fit_strengths(win_matrix(NAMES, games))
    assert ours == pytest.approx(_choix_strengths(games), abs=1e-5)


def test_an_undefeated_competitor_gets_a_finite_strength_that_choix_agrees_with() -> None:
    games = [Game("ada", other, seed, "ada") for other in NAMES[1:] for seed in range(5)]
    games += [Game("bo", "cy", 0, None), Game("cy", "di", 1, "cy")]
    ours = fit_strengths(win_matrix(NAMES, games))
    assert all(abs(value) < 10 for value in ours)
    assert ours[0] == max(ours)
    assert ours == pytest.approx(_choix_strengths(games), abs=1e-5)


def test_a_tie_is_half_a_win_for_each_side() -> None:
    tie = win_matrix(["ada", "bo"], [Game("ada", "bo", 1, None)])
    assert tie == [[0.0, 0.5], [0.5, 0.0]]
    split = [Game("ada", "bo", 1, "ada"), Game("bo", "ada", 2, "bo")]
    assert win_matrix(["ada", "bo"], split) == [[0.0, 1.0], [1.0, 0.0]]
    win_and_tie = [Game("ada", "bo", 1, "ada"), Game("ada", "bo", 2, None)]
    # one win and one tie is 1.5 : 0.5, the same evidence as three wins against one loss, halved
    assert win_matrix(["ada", "bo"], win_and_tie) == [[0.0, 1.5], [0.5, 0.0]]
    assert fit_strengths(tie) == pytest.approx([0.0, 0.0])


def test_ratings_and_bootstrap_intervals_recompute_to_the_same_rounded_numbers() -> None:
    games = _games(random.Random(7), 40)
    first, second = rate(NAMES, games), rate(list(NAMES), list(games))
    assert first == second
    for rating in first:
        assert rating.low <= rating.strength <= rating.high
        assert rating.strength == round(rating.strength, 3)
    assert [r.strength for r in first] == sorted((r.strength for r in first), reverse=True)


def test_a_mean_score_interval_brackets_the_mean_and_recomputes() -> None:
    scores = {1: 0.5, 2: 0.75, 3: 0.25, 4: 1.0}
    assert mean_interval(scores) == mean_interval(dict(reversed(scores.items())))
    mean, low, high = mean_interval(scores)
    assert (low, mean, high) == (min(low, mean), 0.625, max(high, mean))
