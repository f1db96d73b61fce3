"""A profile's meaning lives in one place: ``controller.profiles`` (and the platforms it names)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from controller.profiles import PROFILES, UnknownProfile, profile_named

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = ("controller/profiles.py", "controller/platforms/")
"""Where a profile's name may be compared."""


def _names_a_profile(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in PROFILES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_profile(element) for element in node.elts)
    return False


def profile_comparisons(source: str) -> list[int]:
    """The lines of ``source`` that compare a profile (an expression naming ``profile``) with a
    profile's name; the local model provider, also called ``"local"``, is no profile."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = (node.left, *node.comparators)
        if any(_names_a_profile(side) for side in sides) and any(
            "profile" in ast.unparse(side) for side in sides
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_outside_profiles_and_the_platforms_compares_a_profile_name() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "controller").rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(ALLOWED)
        for line in profile_comparisons(path.read_text(encoding="utf-8"))
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'if args.profile != "local": pass',
        'cluster = profile in ("kind", "gke", "kubernetes")',
        'queue = "q" if request.profile == "gke" else None',
        'cluster = run_record(root, run_id).get("profile") not in ["local"]',
    ],
)
def test_the_check_finds_a_comparison_with_a_profile_name(source: str) -> None:
    assert profile_comparisons(source) != []


@pytest.mark.parametrize(
    "source",
    ['x = [o for o in objs if o["kind"] == "Deployment"]', 'local = provider == "local"'],
)
def test_a_comparison_that_is_not_about_a_profile_passes(source: str) -> None:
    assert profile_comparisons(source) == []


def test_each_profile_says_what_it_means() -> None:
    local, kind, gke = profile_named("local"), profile_named("kind"), profile_named("gke")
    assert not local.cluster and local.task_queue is None and not local.ships_source
    assert kind.cluster and kind.ships_source and not kind.exports
    assert gke.task_queue == "society-runs" and gke.exports


def test_an_unknown_profile_names_the_choices() -> None:
    with pytest.raises(UnknownProfile) as caught:
        profile_named("laptop")
    assert caught.value.reason == "unknown-profile"
    assert "local, kind, gke, kubernetes" in str(caught.value)


def test_a_cluster_profile_runs_the_module_only_in_its_controller_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run worker imports no researcher's module where the controller runs as a Job
    (``activities._execute`` loads the module only where ``runs_controller_here``); the chart's
    worker refuses ``SOCIETY_CONTROLLER_JOB=0`` in a cluster (``check_worker_request``)."""
    monkeypatch.delenv("SOCIETY_CONTROLLER_JOB", raising=False)
    assert profile_named("local").runs_controller_here()
    assert not any(profile_named(name).runs_controller_here() for name in ("kind", "gke"))
    monkeypatch.setenv("SOCIETY_CONTROLLER_JOB", "0")
    assert profile_named("kubernetes").runs_controller_here()
