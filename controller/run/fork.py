"""Forks: a run of the same RunSpec with its parent's seed and roster, intervening at message N.

``society run MODULE.py --fork PARENT_RUN_DIR --at N`` reads the parent's verified ledger
(``read_finished_run``), checks that the module is the parent's experiment, and runs it again with
``ctx.fork`` set. The program calls ``ctx.fork.reached()`` before its first send and enters the
block it returns: the body runs once the router has committed N messages and released them to
delivery, and every message after N is held back from delivery until the block ends, so the
intervention applies exactly from message N + 1 on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from controller.errors import SetupError
from controller.events.run import ForkOrigin
from ledger.errors import LedgerError
from ledger.run_artifacts import locate_ledger
from ledger.verification import verify_ledger

if TYPE_CHECKING:
    from controller.network.commits import MessageCommits
    from controller.run.spec import RunSpec

RUN_STARTED = "society.run-started/v1"
COMMITTED = "society.router-message-committed/v1"


class ForkError(SetupError):
    """A fork cannot be made or used as asked; ``reason`` says why."""

    reason = "fork-invalid"


class ForkRequest(BaseModel):
    """What a fork's controller needs of its parent (JSON-safe: it travels in the run request)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent_ledger: str
    """The parent's ledger directory on the submitter's machine."""
    parent_run_id: str
    parent_head_digest: str
    at: int = Field(ge=0)

    def origin(self) -> ForkOrigin:
        return ForkOrigin(
            parent_run_id=self.parent_run_id,
            parent_head_digest=self.parent_head_digest,
            at=self.at,
        )


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A finished run whose ledger verified: what a fork or a replay runs again."""

    ledger: Path
    run_id: str
    head_digest: str
    definition_id: str
    seed: int
    roster: tuple[str, ...]
    runtimes: dict[str, str]
    messages: int
    """How many messages its router committed."""
    profile: str
    parameters: dict[str, Any] | None
    """Its RunSpec's parameters as it ran."""
    fork: dict[str, Any] | None
    """Its own parent, when it is a fork."""

    def request(self, at: int) -> ForkRequest:
        if not 0 <= at <= self.messages:
            raise ForkError(
                f"--at {at} is not a fork point of {self.run_id}: its router committed "
                f"{self.messages} messages",
                reason="fork-point-out-of-range",
                next_step=f"pass --at between 0 and {self.messages}",
            )
        return ForkRequest(
            parent_ledger=str(self.ledger),
            parent_run_id=self.run_id,
            parent_head_digest=self.head_digest,
            at=at,
        )

    def check_spec(self, spec: RunSpec) -> None:
        """Refuse a module that is not this run's experiment (its id, roster or runtimes)."""
        runtimes = {name: type(d).runtime for name, d in spec.agents.items()}
        if spec.id != self.definition_id or tuple(spec.agents) != self.roster:
            raise ForkError(
                f"the module defines {spec.id!r} with roster {list(spec.agents)}; "
                f"{self.run_id} ran {self.definition_id!r} with roster {list(self.roster)}",
                reason="definition-mismatch",
                next_step=f"pass the module of {self.definition_id}",
            )
        if runtimes != self.runtimes:
            raise ForkError(
                f"the module's runtimes {runtimes} are not {self.run_id}'s {self.runtimes}",
                reason="definition-mismatch",
                next_step=f"pass the module of {self.definition_id} as it ran",
            )


def read_finished_run(path: Path) -> FinishedRun:
    """The run at ``path`` (a run or ledger directory), once its ledger verifies complete."""
    try:
        ledger, _ = locate_ledger(path)
        verified = verify_ledger(None, ledger, require_catalog=False)
    except LedgerError as error:
        raise ForkError(
            f"{path} does not verify: {error.detail}",
            reason="run-unverified",
            next_step=f"`society ledger verify {path}` says why; pass a finished, verified run",
        ) from None
    started = next((e.event for e in verified.envelopes if e.tag == RUN_STARTED), None)
    if started is None or verified.completion is None:
        raise ForkError(
            f"{path} has no complete run in its ledger",
            reason="run-unfinished",
            next_step="pass a finished run",
        )
    return FinishedRun(
        ledger=ledger.resolve(),
        run_id=verified.manifest.run_id,
        head_digest=verified.completion.head_digest,
        definition_id=str(started["definitionId"]),
        seed=int(started["seed"]),
        roster=tuple(started["roster"]),
        runtimes=dict(started["runtimes"]),
        messages=sum(1 for e in verified.envelopes if e.tag == COMMITTED),
        profile=str(started["profile"]),
        parameters=started.get("parameters"),
        fork=started.get("fork"),
    )


class Fork:
    """``ctx.fork``: the parent's ledger reference, the fork point and the intervention's
    parameters; ``reached()`` is where the program intervenes."""

    __slots__ = ("_commits", "_request", "_used", "parameters")

    def __init__(self, request: ForkRequest, parameters: Any, commits: MessageCommits) -> None:
        self._request = request
        self._commits = commits
        self._used = False
        self.parameters = parameters
        """The run's parameters (``RunSpec.define(parameters=...)``, as ``--set`` gave them)."""

    @property
    def parent_run_id(self) -> str:
        return self._request.parent_run_id

    @property
    def parent_head_digest(self) -> str:
        return self._request.parent_head_digest

    @property
    def parent_ledger(self) -> Path:
        return Path(self._request.parent_ledger)

    @property
    def at(self) -> int:
        """The fork point: the number of router-committed messages the fork shares."""
        return self._request.at

    def reached(self) -> ForkPoint:
        """The fork point, held: from this call on, every message after ``at`` commits but waits
        for delivery until the returned block ends (``async with ctx.fork.reached():``, or call
        it first and enter it later, in a task of its own). Call it once, before the first send.
        """
        if self._used:
            raise ForkError(
                "ctx.fork.reached() was called twice",
                reason="fork-point-used",
                next_step="apply the whole intervention in one block",
            )
        self._used = True
        try:
            reached = self._commits.hold_after(self.at)
        except ValueError as error:
            raise ForkError(
                f"the fork point {self.at} has passed ({error})",
                reason="fork-point-passed",
                next_step="call ctx.fork.reached() before the program's first send",
            ) from None
        return ForkPoint(reached, self._commits)

    def release(self) -> None:
        """Deliver whatever is still held (the kernel calls it when the program ends)."""
        self._commits.release_hold()


class ForkPoint:
    """``async with point:`` waits until the fork point's messages went to delivery; the
    intervention goes in the block, and the held messages go on when it ends."""

    __slots__ = ("_commits", "_reached")

    def __init__(self, reached: anyio.Event, commits: MessageCommits) -> None:
        self._reached = reached
        self._commits = commits

    async def __aenter__(self) -> None:
        try:
            await self._reached.wait()
        except BaseException:
            self._commits.release_hold()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._commits.release_hold()
