"""Events the run kernel writes: the run, its roster, each agent runtime, the program and harvest.

They carry names, digests and measurements only; never a token, a credential value or a key.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

from ledger.events import Event, EventCatalog

RunPhase = Literal["startup", "program", "teardown"]
"""When a runtime event happened: before dispatch, while the program ran, or while tearing down."""


class _Part(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class AgentRequest(_Part):
    """What one roster agent asked of the platform's capacity."""

    agent: str
    runtime: str
    cpu: float = Field(ge=0)
    memory_mib: int = Field(ge=0)


class Capacity(_Part):
    """A capacity budget: CPU cores, memory and a count of agents."""

    cpu: float = Field(ge=0)
    memory_mib: int = Field(ge=0)
    agents: int = Field(ge=0)


class DeclaredFile(_Part):
    """A file the runtime placed in the agent's working directory, by digest."""

    path: str
    sha256: str
    size: int = Field(ge=0)


class ForkOrigin(_Part):
    """The run a fork re-runs: its parent's run id and head digest, and the fork point."""

    parent_run_id: str
    parent_head_digest: str
    at: int = Field(ge=0)
    """The fork point: the program intervenes once the router has committed ``at`` messages."""


class RunStarted(Event):
    """The controller owns the ledger and starts the run of ``definition_id``.

    ``parameters`` (the RunSpec's declared parameters, as set) and ``fork`` (the parent of a
    fork) are optional fields, omitted when the run has none.
    """

    tag: ClassVar[str] = "society.run-started/v1"

    definition_id: str
    profile: str
    seed: int
    roster: list[str]
    runtimes: dict[str, str]
    """Roster name -> runtime name."""
    parameters: dict[str, Any] | None = Field(default=None, exclude_if=lambda value: value is None)
    fork: ForkOrigin | None = Field(default=None, exclude_if=lambda value: value is None)


class PodSetAdmission(_Part):
    """One group of identically shaped agents as a cluster queue admitted it."""

    name: str
    count: int = Field(ge=0)
    agents: list[str]
    flavors: dict[str, str] = Field(default_factory=dict)
    """Resource name -> the flavor that covers it."""


class QueueAdmission(_Part):
    """Where a cluster's queue (Kueue) admitted the roster."""

    workload: str
    local_queue: str
    cluster_queue: str
    pod_sets: list[PodSetAdmission]
    waited_ms: float = Field(ge=0)


class RosterAdmitted(Event):
    """The platform admitted the complete roster at once, before any agent started."""

    tag: ClassVar[str] = "society.roster-admitted/v1"

    requests: list[AgentRequest]
    requested: Capacity
    capacity: Capacity
    queue: QueueAdmission | None = None
    """On a cluster: the Kueue Workload that holds the roster's capacity."""


class RosterRefused(Event):
    """The platform refused the roster; no agent was started."""

    tag: ClassVar[str] = "society.roster-refused/v1"

    reason: str
    detail: str
    requests: list[AgentRequest]
    requested: Capacity
    capacity: Capacity


class AgentRuntimeReady(Event):
    """One agent passed its share of the readiness gate: alive, bridge attached, authenticated."""

    tag: ClassVar[str] = "society.agent-runtime-ready/v1"

    agent: str
    runtime: str
    participant_id: str
    image: str
    command: list[str]
    environment: list[str]
    """Names of the environment variables the runtime granted (values are not recorded)."""
    credentials: list[str]
    """Names of the credentials delivered through the secrets file (values are never recorded)."""
    files: list[DeclaredFile]
    startup_ms: float = Field(ge=0)
    sandbox_start: Literal["warm", "cold"] | None = None
    """On a cluster: ``warm`` when the agent's pod came from a warm pool (claimed, then told who
    it is), ``cold`` when it was made for the agent; absent where the platform has no pools."""


class AgentRuntimeStartFailed(Event):
    """One agent did not become ready; the readiness gate fails and the program never runs."""

    tag: ClassVar[str] = "society.agent-runtime-start-failed/v1"

    agent: str
    runtime: str
    reason: str
    detail: str


class ReadinessGatePassed(Event):
    """Every roster agent is ready; the program is dispatched exactly once after this record."""

    tag: ClassVar[str] = "society.readiness-gate-passed/v1"

    agents: list[str]
    elapsed_ms: float = Field(ge=0)


class ReadinessGateFailed(Event):
    """The readiness gate failed; nothing of the program ran."""

    tag: ClassVar[str] = "society.readiness-gate-failed/v1"

    failed: list[str]
    ready: list[str]
    reason: str


class AgentRuntimeCompleted(Event):
    """The runtime reported its own completion and its process exited cleanly."""

    tag: ClassVar[str] = "society.agent-runtime-completed/v1"

    agent: str
    runtime: str
    phase: RunPhase


class AgentRuntimeFailed(Event):
    """The runtime reported a failure of its own before its process ended."""

    tag: ClassVar[str] = "society.agent-runtime-failed/v1"

    agent: str
    runtime: str
    phase: RunPhase
    detail: str
    exit_code: int | None


class AgentProcessExited(Event):
    """The agent's process exited with ``exit_code`` without a runtime report."""

    tag: ClassVar[str] = "society.agent-process-exited/v1"

    agent: str
    runtime: str
    phase: RunPhase
    exit_code: int


class AgentProcessSignaled(Event):
    """The agent's process was ended by a signal."""

    tag: ClassVar[str] = "society.agent-process-signaled/v1"

    agent: str
    runtime: str
    phase: RunPhase
    signal: int
    signal_name: str


class ProgramSucceeded(Event):
    """The experiment's ``execute`` returned ``value`` (JSON; ``None`` when it returned nothing,
    or when the value could not be kept: then ``value_note`` says why)."""

    tag: ClassVar[str] = "society.program-succeeded/v2"

    elapsed_ms: float = Field(ge=0)
    value: JsonValue = None
    value_note: str | None = Field(default=None, exclude_if=lambda note: note is None)


class ProgramSucceededV1(Event):
    """``execute`` returned, as ledgers written before the value was kept record it (read only)."""

    tag: ClassVar[str] = "society.program-succeeded/v1"

    elapsed_ms: float = Field(ge=0)


class ProgramFailed(Event):
    """The experiment's ``execute`` raised; ``reason`` is the error's own, when it has one."""

    tag: ClassVar[str] = "society.program-failed/v1"

    reason: str
    error_type: str
    detail: str
    elapsed_ms: float = Field(ge=0)


class ProgramInterrupted(Event):
    """The run was cancelled by its caller; ``dispatched`` says whether ``execute`` had started."""

    tag: ClassVar[str] = "society.program-interrupted/v1"

    reason: str
    dispatched: bool


class PlatformFailed(Event):
    """The platform itself failed (spawn failure, an agent lost before dispatch, a lost server)."""

    tag: ClassVar[str] = "society.platform-failed/v1"

    reason: str
    detail: str


HarvestOutcome = Literal["harvested", "absent", "oversize", "unreadable"]


class AgentWorkspaceFileHarvested(Event):
    """One declared workspace file, copied into the run's artifacts (or why it was not)."""

    tag: ClassVar[str] = "society.agent-workspace-file-harvested/v1"

    agent: str
    path: str
    outcome: HarvestOutcome
    sha256: str | None
    size: int | None
    artifact: str | None
    """Path of the copy, relative to the run's artifact directory."""
    limit_bytes: int
    detail: str | None = None


class AgentRuntimeArtifact(Event):
    """One runtime artifact (a log), copied into the run's artifacts (or why it was not)."""

    tag: ClassVar[str] = "society.agent-runtime-artifact/v1"

    agent: str
    kind: str
    name: str
    outcome: HarvestOutcome
    sha256: str | None
    size: int | None
    artifact: str | None
    limit_bytes: int
    detail: str | None = None


class AgentIsolation(Event):
    """How the platform isolates the run's agents; ``sandbox="none"`` when the user opted out.

    On the local profile: ``bubblewrap`` (own mount, PID, network, IPC namespaces; uid 65532) or
    ``none`` (``--unsandboxed``: agents run as the controller's user and see what it sees).
    """

    tag: ClassVar[str] = "society.agent-isolation/v1"

    profile: str
    sandbox: Literal["bubblewrap", "none"]
    tool: str | None = None
    """The sandbox tool's version line."""
    uid: int | None = None
    """The uid agents run as, inside their sandbox."""
    cgroups: Literal["v1", "v2", "none"]
    pids_max: int | None = None
    """Processes and threads one agent may hold at once (its cgroup's limit)."""


run_events = EventCatalog.make(
    RunStarted,
    AgentIsolation,
    RosterAdmitted,
    RosterRefused,
    AgentRuntimeReady,
    AgentRuntimeStartFailed,
    ReadinessGatePassed,
    ReadinessGateFailed,
    AgentRuntimeCompleted,
    AgentRuntimeFailed,
    AgentProcessExited,
    AgentProcessSignaled,
    ProgramSucceeded,
    ProgramSucceededV1,
    ProgramFailed,
    ProgramInterrupted,
    PlatformFailed,
    AgentWorkspaceFileHarvested,
    AgentRuntimeArtifact,
)
