"""Operator commands read the repository's checkout, and say so when there is none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controller.ops.repository import ROOT, CheckoutMissing, checkout


def test_the_installed_package_finds_the_checkout_it_runs_from() -> None:
    assert checkout() == ROOT
    assert (ROOT / "helm" / "society-runner" / "Chart.yaml").is_file()


def test_a_directory_without_the_chart_is_refused_with_the_next_step(tmp_path: Path) -> None:
    with pytest.raises(CheckoutMissing) as caught:
        checkout(tmp_path)
    assert caught.value.reason == "checkout-missing"
    assert "helm/society-runner/Chart.yaml is missing" in str(caught.value)
    assert "next step: run it from a clone of the repository" in str(caught.value)


def test_profile_check_outside_a_checkout_exits_2_with_one_line(tmp_path: Path) -> None:
    """A copy of the package without the repository around it, as a wheel install would be."""
    import shutil

    shutil.copytree(ROOT / "controller", tmp_path / "controller")
    shutil.copytree(ROOT / "ledger", tmp_path / "ledger")
    shutil.copytree(ROOT / "agent_images", tmp_path / "agent_images")
    probe = "import sys; from controller.cli import main; sys.exit(main(['profile', 'check']))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "is not a Society Runner checkout" in done.stderr
    assert "Traceback" not in done.stderr
