"""Grade a fork of the negotiation: did they agree, and did the fork change its parent's outcome?

society grade examples/graders/partition_fork.py <fork run directory>

The parent is looked for beside the fork (the same artifact root), by the run id the fork's
``RunStarted`` names; a run that is no fork, or whose parent is not there, is graded alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller import LinkMessageDropped, RouterMessageCommitted, RunStarted, load_run_spec
from ledger import LedgerArtifacts, LedgerError, open_ledger_artifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "partition_fork.py")
catalog = run_spec.catalog
ConsensusReached = run_spec.events.class_for("acme.consensus-reached/v1")


def outcome(ledger: LedgerArtifacts) -> dict[str, Any]:
    consensus = next(iter(ledger.events(ConsensusReached)), None)
    return {
        "agreed": consensus is not None,
        "proposal": getattr(consensus, "proposal", None),
        "messages": sum(1 for _ in ledger.events(RouterMessageCommitted)),
    }


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    started = next(iter(ledger.events(RunStarted)))
    graded = {**outcome(ledger), "dropped": sum(1 for _ in ledger.events(LinkMessageDropped))}
    if started.fork is None:
        return {**graded, "fork": None}
    fork = {"parent": started.fork.parent_run_id, "at": started.fork.at}
    parent_dir = ledger.directory.parents[2] / started.fork.parent_run_id
    try:
        parent = outcome(open_ledger_artifacts(catalog, parent_dir / "ledger" / "main"))
    except LedgerError:
        return {**graded, "fork": fork, "parent": None, "outcomeChanged": None}
    changed = (parent["agreed"], parent["proposal"]) != (graded["agreed"], graded["proposal"])
    return {**graded, "fork": fork, "parent": parent, "outcomeChanged": changed}
