"""The ``peer`` runtime, controller side: an evaluation peer the program observes, never commands.

Its policy is Python code: a module file handed to the sandbox through the descriptor's
``files`` and the name of a function of what the peer has received
(``society_sandbox.runtimes.peer``). It runs in its own sandbox with the production agent client and
router, so its messages are committed like any agent's. Its bridge (``PeerObservations``) reads
what the peer publishes; it has no call that makes the peer send or stop, and the program behind
the bridge refuses the owner API's ``instruct`` and ``stop`` (``not-offered``). Teardown ends it
by signal (SIGTERM, then ``term_grace_s`` before SIGKILL). The controller never runs the policy:
it parses it, to refuse a missing module or function when the RunSpec is defined. The Python
packages it declares (``packages``) are checked before the run starts: by the local profile's
admission against the environment its agents run in, and by the peer itself, in its sandbox,
before it loads the policy (the readiness gate then says which is missing).
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from controller.agents.bridge import BridgeOwner, attach_bridge
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    check_packages,
    checked_options,
    file_bytes,
)
from ledger.events import Event, EventCatalog
from society_sandbox.runtimes.peer import PEER_CONFIG_FILE, PeerSettings

PEER_IMAGE = "society/peer:dev"
"""The locally built image; cluster profiles need it pinned by digest (``image=...@sha256:...``)."""
PEER_COMMAND = ("python", "-m", "agent_images.peer")
PEER_RESOURCES = Resources(cpu=0.02, memory_mib=64, memory_limit_mib=1536)
PEER_TERM_GRACE_S = 10.0
"""A policy may import heavy libraries, whose interpreter shutdown outlasts the 2 s default."""


class PeerObservation(BaseModel):
    """What a peer's bridge shows: the runtime's counters and what its policy published."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    name: str
    participant_id: str | None = None
    received: int = 0
    sent: int = 0
    max_sends: int = 0
    policy_calls: int = 0
    policy_errors: int = 0
    last_policy_error: str | None = None
    limit: str | None = None
    """``max-sends`` once the policy asked to say more than ``max_sends`` allows."""
    unsent: int = 0
    """What the policy asked to say past that limit."""
    conversations: list[str] = []
    published: dict[str, Any] = {}
    stopping: bool = False

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> PeerObservation:
        keys = {
            "participantId": "participant_id",
            "maxSends": "max_sends",
            "policyCalls": "policy_calls",
            "policyErrors": "policy_errors",
            "lastPolicyError": "last_policy_error",
        }
        return cls.model_validate({keys.get(k, k): v for k, v in body.items()})


class PeerStopped(Event):
    """An evaluation peer ended; its last observations, as it reported them. ``limit`` is
    ``max-sends`` when its policy asked to say more than ``max_sends`` allowed (``unsent``: how
    many sends it was refused)."""

    tag: ClassVar[str] = "society.peer-stopped/v2"

    agent: str
    outcome: str
    received: int
    sent: int
    policy_calls: int
    policy_errors: int
    last_policy_error: str | None
    limit: str | None
    unsent: int
    published: dict[str, Any]


class PeerStoppedV1(Event):
    """A peer's end as ledgers written before peers named their limit record it (read only)."""

    tag: ClassVar[str] = "society.peer-stopped/v1"

    agent: str
    outcome: str
    received: int
    sent: int
    policy_calls: int
    policy_errors: int
    last_policy_error: str | None
    published: dict[str, Any]


peer_events = EventCatalog.make(PeerStopped, PeerStoppedV1)


class PeerObservations(BridgeOwner):
    """A peer's bridge: read-only. ``observe()`` (typed) and ``state()`` (the raw mapping)."""

    async def observe(self) -> PeerObservation:
        """The peer's counters and what its policy last published."""
        return PeerObservation.from_wire(await self.state())


@dataclass(frozen=True, eq=False, kw_only=True)
class PeerRuntime(RuntimeDescriptor):
    """An evaluation peer: ``function`` of ``module`` (one of ``files``) decides what it sends."""

    runtime: ClassVar[str] = "peer"
    ends_when_asked: ClassVar[bool] = False  # nothing the controller sends makes a peer stop

    module: str
    function: str
    max_sends: int = 100
    image: str = PEER_IMAGE
    command: tuple[str, ...] = PEER_COMMAND
    resources: Resources = PEER_RESOURCES
    events: EventCatalog = peer_events
    term_grace_s: float = PEER_TERM_GRACE_S

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_policy(self.files, self.module, self.function)
        if self.max_sends < 0:
            raise RuntimeDescriptorError(
                f"max_sends is {self.max_sends}; give 0 or more", reason="bad-option"
            )

    def attach(
        self, access: SandboxAccess
    ) -> AbstractAsyncContextManager[Attachment[PeerObservations]]:
        return self._attached(access)

    @asynccontextmanager
    async def _attached(self, access: SandboxAccess) -> AsyncIterator[Attachment[PeerObservations]]:
        """The bridge; a peer that died before it could say why (a C library aborting on a failed
        allocation) gets the memory limit it ran under named in the error."""
        attached = False
        try:
            async with self._bridge(access) as attachment:
                attached = True
                yield attachment
        except RuntimeDescriptorError as exc:
            if attached or exc.reason != "exited-before-ready":
                raise
            limit = self.resources.memory_limit_mib
            raise RuntimeDescriptorError(
                f"{exc}; its memory limit is {limit} MiB (resources.memory_limit_mib; on the local "
                f"profile, its address-space limit): if its log shows a failed allocation or "
                f"mapping, raise it with peer(..., resources=Resources(memory_limit_mib=...))",
                reason=exc.reason,
            ) from None

    def _bridge(
        self, access: SandboxAccess
    ) -> AbstractAsyncContextManager[Attachment[PeerObservations]]:
        async def stopped(report: Mapping[str, Any]) -> None:
            if access.record is not None and isinstance(report.get("state"), dict):
                seen = PeerObservation.from_wire(report["state"])
                await access.record(
                    PeerStopped(
                        agent=access.agent,
                        outcome=str(report.get("outcome") or "unknown"),
                        received=seen.received,
                        sent=seen.sent,
                        policy_calls=seen.policy_calls,
                        policy_errors=seen.policy_errors,
                        last_policy_error=seen.last_policy_error,
                        limit=seen.limit,
                        unsent=seen.unsent,
                        published=seen.published,
                    )
                )

        return attach_bridge(
            access,
            PeerObservations,
            runtime="peer",
            timeout_s=self.ready_timeout_s,
            on_report=stopped,
        )


@checked_options
def peer(
    module: str,
    function: str,
    *,
    files: Mapping[str, str | bytes | Path],
    max_sends: int = 100,
    image: str = PEER_IMAGE,
    resources: Resources | None = None,
    environment: Mapping[str, str] | None = None,
    harvest: Harvest | None = None,
    ready_timeout_s: float = 60.0,
    term_grace_s: float = PEER_TERM_GRACE_S,
    packages: tuple[str, ...] = (),
) -> PeerRuntime:
    """An evaluation peer whose policy is ``function`` in ``module``, a key of ``files``.

    ``files`` maps working-directory paths to text, bytes or a ``Path`` read now (the policy
    module and any sibling modules it imports). ``packages`` are the Python distributions the
    policy imports (PEP 508, e.g. ``("numpy>=1.26",)``), checked before the run starts. The peer
    stops sending after ``max_sends``; at teardown it has ``term_grace_s`` to exit after
    SIGTERM. Its files and settings are harvested.
    """
    given = {
        path: file_bytes(f"peer file {path}", content, "peer-file-missing")
        for path, content in files.items()
    }
    if PEER_CONFIG_FILE in given:
        raise RuntimeDescriptorError(
            f"{PEER_CONFIG_FILE} is written from peer()'s arguments", reason="bad-path"
        )
    packages = check_packages(packages)
    settings = PeerSettings(
        module=module, function=function, max_sends=max(max_sends, 0), packages=packages
    )
    written = {PEER_CONFIG_FILE: settings.model_dump_json(indent=2).encode()}
    return PeerRuntime(
        module=module,
        function=function,
        max_sends=max_sends,
        image=image,
        resources=resources or PEER_RESOURCES,
        environment=dict(environment or {}),
        files={**given, **written},
        harvest=harvest or Harvest(files=(*sorted(given), PEER_CONFIG_FILE)),
        ready_timeout_s=ready_timeout_s,
        term_grace_s=term_grace_s,
        packages=packages,
    )


def _check_policy(files: Mapping[str, bytes], module: str, function: str) -> None:
    """The policy module is one of ``files``, parses, and defines ``function`` at top level."""
    if module not in files:
        shown = ", ".join(sorted(set(files) - {PEER_CONFIG_FILE})) or "none"
        raise RuntimeDescriptorError(
            f"the peer's policy module {module!r} is not one of its files ({shown}); hand it "
            f"over with files={{{module!r}: Path(...)}}",
            reason="policy-module-missing",
        )
    if not module.endswith(".py"):
        raise RuntimeDescriptorError(
            f"the peer's policy module {module!r} must be a .py file", reason="bad-policy-module"
        )
    try:
        tree = ast.parse(files[module], filename=module)
    except (SyntaxError, ValueError) as exc:
        raise RuntimeDescriptorError(
            f"the peer's policy module {module} does not parse: {exc}", reason="bad-policy-module"
        ) from None
    defined = [
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    if function not in defined:
        shown = ", ".join(defined) or "no functions"
        raise RuntimeDescriptorError(
            f"the peer's policy module {module} defines no top-level function {function!r} "
            f"(it defines {shown}); name a 'def' of the module",
            reason="policy-function-missing",
        )


__all__ = [
    "PeerObservation",
    "PeerObservations",
    "PeerRuntime",
    "PeerStopped",
    "peer",
    "peer_events",
]
