"""``society profile check [kind|gke]``: the cluster profiles' static checks, offline."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from controller.ops.checks.check import PROFILES, CheckOutcome

LIMITS = (
    "these checks prove the checked-in contracts only (chart, schemas, Terraform structure, pins, "
    "scripts); they do not qualify a live cluster, check that a digest exists in a registry, or "
    "run `tofu validate` against the Google provider (terraform/ci/validate.yml does, where a "
    "registry is reachable)"
)


def add_commands(subparsers: Any) -> None:
    profile = subparsers.add_parser(
        "profile", help="cluster profiles: static checks", description="Cluster profiles."
    )
    actions = profile.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="lint, render and validate a profile's chart, Terraform, pins and scripts, offline",
        description=(
            "Runs helm lint and helm template with the profile's values; validates every rendered "
            "object and every object the platform creates for a sample roster against the pinned "
            "Kubernetes, Kueue and Agent Sandbox schemas (kubeconform); for gke, tofu fmt -check, "
            "tflint's built-in rules and structure assertions on terraform/; checks image digests, "
            "that the pins agree, and bash -n and shellcheck on every script. Exit 0: all passed; "
            f"1: a check failed; 2: a tool is missing. Note: {LIMITS}."
        ),
    )
    check.add_argument(
        "profiles", nargs="*", metavar="PROFILE", help="kind, gke, or both (default: both)"
    )
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from controller.ops.checks.check import run_checks
    from controller.ops.checks.tools import ToolMissing
    from controller.ops.repository import CheckoutMissing, checkout

    try:
        checkout()
    except CheckoutMissing as exc:
        print(f"society profile check: {exc}", file=sys.stderr)
        return 2
    unknown = [p for p in args.profiles if p not in PROFILES]
    if unknown:
        print(
            f"society profile check: unknown profile {', '.join(unknown)}; choose from "
            f"{', '.join(PROFILES)}",
            file=sys.stderr,
        )
        return 2
    failed = 0
    for profile in args.profiles or PROFILES:
        print(f"profile {profile}:")

        def report(outcome: CheckOutcome) -> None:
            print(f"  {'ok  ' if outcome.passed else 'FAIL'} {outcome.name}", flush=True)
            for problem in outcome.problems:
                print("       " + problem.replace("\n", "\n       "))

        try:
            outcomes = run_checks(profile, report)
        except ToolMissing as exc:
            print(f"society profile check: {exc}", file=sys.stderr)
            return 2
        failed += sum(not outcome.passed for outcome in outcomes)
    print(f"{'all checks passed' if not failed else f'{failed} check(s) failed'}; note: {LIMITS}")
    return 1 if failed else 0
