"""The repository checkout that operator tooling reads: the chart, the kind and Terraform
profiles, the image and tool build scripts. An installed package without its checkout has none of
them, so each operator command first asks ``checkout()``, which says so and what to do."""

from __future__ import annotations

from pathlib import Path

from controller.errors import OpsError

ROOT = Path(__file__).resolve().parents[2]
"""Where the checkout is, if this package runs from one (``pip install -e .``)."""
MARKERS = (
    "helm/society-runner/Chart.yaml",
    "kind/versions.env",
    "scripts/tool-versions.env",
)
"""Files every checkout holds and every operator command reads."""


class CheckoutMissing(OpsError):
    """An operator command runs from an installed package, not a repository checkout."""

    reason = "checkout-missing"


def checkout(root: Path = ROOT) -> Path:
    """``root`` when it is a checkout; raises ``CheckoutMissing`` naming what is absent."""
    missing = [marker for marker in MARKERS if not (root / marker).is_file()]
    if missing:
        raise CheckoutMissing(
            f"this command reads the repository's chart, profiles and build scripts, and {root} "
            f"is not a Society Runner checkout ({missing[0]} is missing)\n  next step: run it "
            "from a clone of the repository, installed with `./scripts/setup.sh` (which installs "
            "it editable, so `society` finds its checkout)"
        )
    return root
