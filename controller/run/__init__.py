"""The experiment API and the run kernel: ``RunSpec``, ``Run.execute``, outcomes, ``execute_run``.

Never imports Temporal or Kubernetes; a profile's platform is loaded only when a run needs it.
"""

from controller.run.context import CustomerEvents, LedgerView, RunContext
from controller.run.kernel import Run
from controller.run.outcomes import (
    Exit,
    Failure,
    Outcome,
    PlatformCause,
    PlatformLost,
    ProgramFinished,
    Success,
)
from controller.run.platform import (
    Admission,
    AdmissionRefused,
    AgentLaunch,
    HarvestedItem,
    Platform,
    PlatformError,
    PlatformSession,
    RunPlacement,
    Sandbox,
    SandboxStartError,
)
from controller.run.progress import NO_PROGRESS, Counter, NoProgress, Progress
from controller.run.request import RunRequest, RunResult, execute_run
from controller.run.runid import RunIdError, check_run_id, new_run_id
from controller.run.spec import RunSpec, RunSpecError, load_run_spec

__all__ = [
    "NO_PROGRESS",
    "Admission",
    "AdmissionRefused",
    "AgentLaunch",
    "Counter",
    "CustomerEvents",
    "Exit",
    "Failure",
    "HarvestedItem",
    "LedgerView",
    "NoProgress",
    "Outcome",
    "Platform",
    "PlatformCause",
    "PlatformError",
    "PlatformLost",
    "PlatformSession",
    "ProgramFinished",
    "Progress",
    "Run",
    "RunContext",
    "RunIdError",
    "RunPlacement",
    "RunRequest",
    "RunResult",
    "RunSpec",
    "RunSpecError",
    "Sandbox",
    "SandboxStartError",
    "Success",
    "check_run_id",
    "execute_run",
    "load_run_spec",
    "new_run_id",
]
