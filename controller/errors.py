"""The typed errors of ``controller``: one tree under ``SocietyError``.

Every error carries a stable, machine-readable ``reason`` (its class names a default; an instance
may carry a more specific one) and a message that says what happened and what to do next:
``str(error)`` is its ``detail``, followed by ``"\\n  next step: ..."`` when it has a
``next_step``. The ``society`` command prints any of them as one ``society COMMAND: error:
MESSAGE`` report, without a traceback. The evidence layer's errors are ``ledger.errors.LedgerError``
(``ledger`` imports nothing from ``controller``). The groups are defined here; each leaf lives
beside the code that raises it (the module named after it):

    SocietyError  society_sandbox.errors
    ├── SetupError  nothing was started: fix what the message names and run it again
    │   ├── RunSpecError  controller.run.spec
    │   ├── RunRequestError  controller.run.request  (also a ValueError)
    │   ├── RunIdError  controller.run.runid  (also a ValueError)
    │   ├── HandoverRefused  controller.run.handover
    │   ├── ForkError  controller.run.fork
    │   ├── InspectUnavailable  controller.viewer.inspect_log
    │   ├── ArtifactRootUnsafe  controller.run.artifact_root
    │   ├── UnknownProfile  controller.profiles
    │   ├── ClusterUnavailable  controller.platforms.kubernetes.preflight
    │   └── PartMissing  controller.platforms.parts
    ├── PlatformError  the platform could not start, hold or stop a sandbox
    │   ├── AdmissionRefused  controller.run.platform
    │   ├── SandboxStartError  controller.run.platform
    │   ├── ModuleSourceError  controller.run.module_source
    │   ├── SandboxUnavailable  controller.platforms.local.sandbox
    │   ├── CgroupUnavailable  controller.platforms.local.cgroup
    │   ├── LocalModelError  controller.platforms.local_model
    │   ├── KubeError  controller.platforms.kubernetes.api
    │   └── WorkerRefused  controller.incluster.worker_requests
    ├── LifecycleError  Temporal could not be reached, or refused or could not prove the run
    │   ├── TemporalUnavailable  controller.lifecycle.server
    │   ├── RunRefused  controller.lifecycle.driver
    │   └── ResultUnproven  controller.lifecycle.submission
    ├── ModelGatewayError  the run's model gateway could not start
    │   ├── ModelServiceError  controller.modelgateway.service
    │   └── UnknownProviderError  controller.modelgateway.config  (also a ValueError)
    ├── OpsError  an operator command (cluster up/down, profile check) could not finish
    │   ├── CheckoutMissing  controller.ops.repository
    │   ├── KindPatchRefused  controller.ops.cluster.kind_patches
    │   ├── PrerequisitesMissing  controller.ops.cluster.prerequisites
    │   ├── ProfileFileError  controller.platforms.kubernetes.profile_file
    │   ├── StepFailed  controller.ops.cluster.steps
    │   ├── ToolMissing  controller.ops.checks.tools
    │   ├── HelmTemplateFailed  controller.ops.checks.check
    │   ├── SchemaSourceIncomplete  controller.ops.checks.kube_schemas
    │   └── TerraformUnreadable  controller.ops.checks.terraform_checks
    ├── NetworkError  society_sandbox.network.errors
    ├── FrameError  society_sandbox.framing  (a process channel's frame over its limit or cut off)
    ├── ChannelClosed  controller.program.wire  (the module's process or its channel is gone)
    ├── CallsOverBudget  controller.program.wire  (its waiting calls would pass the byte budget)
    ├── CodecError  controller.program.codec  (a value that cannot cross to or from it)
    ├── ProgramCallRefused  controller.program.serve  (a call on ctx the controller refuses)
    ├── ProgramRaised  controller.program.process  (its program raised; named like its error)
    ├── ControllerRefused  controller.program.proxies  (the module's side of a refusal)
    ├── ProgramCancelled  controller.program.host  (its program ended by a cancellation)
    ├── OwnerError  controller.agents.bridge
    │   └── NanoClawOwnerError  controller.agents.nanoclaw_owner
    ├── OwnerTypeError  controller.agents.roster  (also a TypeError)
    ├── RuntimeDescriptorError  controller.agents.runtime
    ├── LedgerExportError  controller.stores.gcs
    ├── LedgerHomeError  controller.incluster.ledger_home
    └── SuiteError  controller.suites.definition

The root, ``SocietyError``, lives in the wall package (``society_sandbox.errors``) so that the
programs inside a sandbox raise the same tree; this module imports nothing else of the project, so
every layer may raise and catch these.
"""

from __future__ import annotations

from society_sandbox.errors import SocietyError

__all__ = [
    "LifecycleError",
    "ModelGatewayError",
    "OpsError",
    "PlatformError",
    "SetupError",
    "SocietyError",
]


class SetupError(SocietyError):
    """Nothing was started: fix what the message names and run the same command again."""

    reason = "setup-failed"


class PlatformError(SocietyError):
    """The platform could not start, hold or stop an agent's sandbox, or refuses the run."""

    reason = "platform-failed"


class LifecycleError(SocietyError):
    """Temporal could not be reached, refused the run, or answered with a result it cannot
    prove."""

    reason = "lifecycle-failed"


class ModelGatewayError(SocietyError):
    """The run's model gateway (or the model service around it) could not start."""

    reason = "model-gateway-failed"


class OpsError(SocietyError):
    """An operator command (``society cluster``, ``society profile check``) could not finish."""

    reason = "ops-failed"
