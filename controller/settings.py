"""Every setting the controller reads from its environment, spelled once with its meaning, and the
one place that reads the environment.

Each entry point (the ``society`` command, the run worker, the controller Job, the in-cluster
export, a local template or model server) reads the environment once, ``Settings.read()``, and
installs the result (``install``); what runs below takes it from its caller or from ``current()``.
A command-line option that overrides a variable (``--unsandboxed``, ``--artifacts``) or a cluster
profile file that fills one makes a new ``Settings`` (``overlay``, ``fill``); nothing writes
``os.environ`` to talk to another module. The boot contract between the controller and an agent
(``SOCIETY_AGENT_NAME``, ``SOCIETY_RUN_SEED``, ...) is the wall's, ``society_sandbox.boot``.
``docs/cli.md``'s environment tables are checked against ``VARIABLES``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from society_sandbox import boot

Audience = Literal["user", "cluster", "internal"]


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable: its name, what it means, and who sets it (a user, a cluster
    profile, or Society Runner itself for a process of its own)."""

    name: str
    meaning: str
    audience: Audience = "user"


_V = Variable

ARTIFACTS = _V("SOCIETY_ARTIFACTS", "the artifact root (default `./artifacts`)")
TASK_QUEUE = _V("SOCIETY_TASK_QUEUE", "as `--task-queue`; a worker polls this queue")
SIGNING_KEY = _V(
    "SOCIETY_SIGNING_KEY",
    "PEM file of an operator's Ed25519 key: ledgers then verify as `pinned` against its public "
    "half",
)
LEDGER_EXPORT = _V(
    "SOCIETY_LEDGER_EXPORT",
    "`gs://BUCKET`: in a run worker, export each run directory to `gs://BUCKET/<run id>/` at "
    "cleanup",
)
GCS_TOKEN_FILE = _V(
    "SOCIETY_GCS_TOKEN_FILE", "a file holding an access token for the ledger bucket"
)
CREDENTIALS = _V(
    "SOCIETY_CREDENTIALS",
    "names of this environment's variables a run may hand its agents or send to a model "
    "provider, comma-separated (also `society run --credential NAME`); none by default",
)
PROVIDER_URLS = _V(
    "SOCIETY_PROVIDER_URLS",
    "model providers' base URLs a run's gateway may call besides the named providers' "
    "(`https://api.openai.com/v1`), comma-separated",
)
UNSANDBOXED = _V("SOCIETY_UNSANDBOXED", "`1`: as `--unsandboxed`")
LOCAL_TEMPLATE = _V(
    "SOCIETY_LOCAL_TEMPLATE",
    "`1`: local profile, as root: start Python agents by forking one template per runtime",
)
NO_INSTALL = _V(
    "SOCIETY_NO_INSTALL",
    "`1`: local profile: fail, naming the install command, instead of installing the local "
    "model or OpenClaw when a roster first needs one",
)
DEBUG = _V("SOCIETY_DEBUG", "`1`: keep the Temporal SDK's tracebacks of failed activities")
KIND_DIR = _V(
    "SOCIETY_KIND_DIR",
    "where `scripts/install-kind.sh` puts kind, under `<version>/bin` (default "
    "`~/.cache/society-runner/kind`); `cluster up` finds it there",
    "cluster",
)
TOOLS_DIR = _V(
    "SOCIETY_TOOLS_DIR",
    "where `scripts/build-tools.sh` put helm, tofu, tflint and kubeconform (default "
    "`~/.cache/society-runner/tools`)",
)
TEMPORAL_IDLE = _V(
    "SOCIETY_TEMPORAL_IDLE_S",
    "seconds the local Temporal dev server outlives its last run (default 300; 0: it stops with "
    "the run)",
)
LOCAL_MODEL_THREADS = _V(
    "SOCIETY_LOCAL_MODEL_THREADS", "the local model's decoding threads (default: half the cores)"
)

KUBECONFIG = _V("SOCIETY_KUBECONFIG", "the cluster's kubeconfig (default `$KUBECONFIG`)", "cluster")
KUBE_CONTEXT = _V("SOCIETY_KUBE_CONTEXT", "its context (default: the current one)", "cluster")
KUBE_IN_CLUSTER = _V(
    "SOCIETY_KUBE_IN_CLUSTER", "`1`: use the pod's service account (in-cluster)", "cluster"
)
KUBE_IMPERSONATE = _V(
    "SOCIETY_KUBE_IMPERSONATE", "act as this user (default: the kubeconfig's)", "cluster"
)
CLUSTER_QUEUE = _V(
    "SOCIETY_CLUSTER_QUEUE", "the Kueue ClusterQueue (default `society-agents`)", "cluster"
)
ADMISSION_TIMEOUT_S = _V(
    "SOCIETY_ADMISSION_TIMEOUT_S", "how long Kueue may take to admit the roster (3600)", "cluster"
)
STARTUP_TIMEOUT_S = _V(
    "SOCIETY_STARTUP_TIMEOUT_S", "how long one agent's pod may take to be ready (600)", "cluster"
)
RUN_DEADLINE_S = _V(
    "SOCIETY_RUN_DEADLINE_S", "the Sandboxes' `shutdownTime`, a safety net (86400)", "cluster"
)
CREDENTIALS_NAMESPACE = _V(
    "SOCIETY_CREDENTIALS_NAMESPACE",
    "where provider keys' Secrets live (default `society-credentials`)",
    "cluster",
)
KUBE_WORKER_NAMESPACES = _V(
    "SOCIETY_KUBE_WORKER_NAMESPACES",
    "`1`: the run worker's activities prepare and delete each run's namespace",
    "cluster",
)
CONTROLLER_JOB = _V(
    "SOCIETY_CONTROLLER_JOB",
    "`0`: the controller runs here, not as the run's Job (debugging; needs "
    "`SOCIETY_ROUTER_ADDRESS`)",
    "cluster",
)
ROUTER_ADDRESS = _V(
    boot.ROUTER_ADDRESS, "the router's address as agents reach it (`host:port`)", "cluster"
)
IMAGE_MAP = _V(
    "SOCIETY_IMAGE_MAP", "the image map: a path to its JSON, or the JSON itself", "cluster"
)
CONTROLLER_IMAGE = _V(
    "SOCIETY_CONTROLLER_IMAGE", "the controller Job's image (default: the map's)", "cluster"
)
CONTROLLER_NODE_SELECTOR = _V(
    "SOCIETY_CONTROLLER_NODE_SELECTOR", "the controller Job's nodes (`k=v,k=v`)", "cluster"
)
LEDGER_PVC = _V(
    "SOCIETY_LEDGER_PVC", "a claim per run for its ledger (default: an `emptyDir`)", "cluster"
)
LEDGER_STORAGE_CLASS = _V(
    "SOCIETY_LEDGER_STORAGE_CLASS", "that claim's StorageClass (default: the cluster's)", "cluster"
)
LEDGER_SIZE = _V("SOCIETY_LEDGER_SIZE", "that claim's size (`1Gi`)", "cluster")
LEDGER_NODE_ROOT = _V(
    "SOCIETY_LEDGER_NODE_ROOT", "where the nodes keep the ledger volumes", "cluster"
)
LEDGER_HOST_ROOT = _V(
    "SOCIETY_LEDGER_HOST_ROOT", "where this machine sees those volumes (a copy home)", "cluster"
)
AGENT_NODE_SELECTOR = _V("SOCIETY_AGENT_NODE_SELECTOR", "the agents' nodes (`k=v,k=v`)", "cluster")
AGENT_TOLERATIONS = _V(
    "SOCIETY_AGENT_TOLERATIONS", "the agents' tolerations (a JSON list)", "cluster"
)
WARM_POOLS = _V("SOCIETY_WARM_POOLS", "`0`: every agent starts cold", "cluster")

PROFILE = _V("SOCIETY_PROFILE", "the controller Job's profile", "internal")
RUN_ID = _V(
    "SOCIETY_RUN_ID",
    "the run a process belongs to: the controller Job's run, and the mark on every local "
    "process of a run (the reaper kills no process without it)",
    "internal",
)
RUN_MODULE = _V("SOCIETY_RUN_MODULE", "the controller Job's mounted module", "internal")
RUN_MODULE_SHA256 = _V(
    "SOCIETY_RUN_MODULE_SHA256", "that module's digest, checked before it is read", "internal"
)
RUN_SEED = _V(boot.RUN_SEED, "the run's seed (the controller Job's, and each agent's)", "internal")
RESULT_PATH = _V(
    "SOCIETY_RESULT_PATH", "where the controller Job or export Job writes its result", "internal"
)
SIGNER_SOCKET = _V(
    "SOCIETY_SIGNER_SOCKET", "the controller Job's signer: the key stays in its process", "internal"
)
PARENT_PID = _V("SOCIETY_PARENT_PID", "the local model server's parent, checked", "internal")
LOCAL_MODEL_KEY = _V(
    "SOCIETY_LOCAL_MODEL_KEY", "the local model server's API key, for its gateway", "internal"
)
TEMPLATE_FD = _V("SOCIETY_TEMPLATE_FD", "a local template's control socket", "internal")
TEMPLATE_PARENT = _V("SOCIETY_TEMPLATE_PARENT", "a local template's parent, checked", "internal")
TEMPLATE_NAMESPACES = _V(
    "SOCIETY_TEMPLATE_NAMESPACES", "a local template's mount plan (a file)", "internal"
)
TEMPLATE_PRELOAD = _V(
    "SOCIETY_TEMPLATE_PRELOAD", "the modules a local template imports (JSON)", "internal"
)

VARIABLES: tuple[Variable, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Variable)
)
"""Every ``SOCIETY_*`` variable the controller reads or sets, in the order above."""

CONTROLLER_PREFIXES = ("SOCIETY_", "TEMPORAL_", "KUBECONFIG", "GOOGLE_APPLICATION_CREDENTIALS")
"""The controller's own settings: none of them reaches the module's process."""
DEFAULT_ARTIFACTS = Path("artifacts")
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True, slots=True)
class Settings:
    """The environment as an entry point read it, once; typed accessors for what it holds."""

    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def read(cls) -> Settings:
        """The one read of this process's environment."""
        return cls(MappingProxyType(dict(os.environ)))

    def get(self, variable: Variable | str) -> str | None:
        """The variable's value, ``None`` when it is unset or empty."""
        name = variable.name if isinstance(variable, Variable) else variable
        return self.environ.get(name) or None

    def flag(self, variable: Variable) -> bool:
        return (self.get(variable) or "").strip().lower() in _TRUE

    def overlay(self, values: Mapping[str, str]) -> Settings:
        """These settings with ``values`` set (an option that overrides a variable)."""
        return Settings(MappingProxyType({**self.environ, **values}))

    def fill(self, values: Mapping[str, str]) -> tuple[Settings, dict[str, str]]:
        """These settings with ``values`` set where unset (a variable that is set wins), and
        what was filled."""
        filled = {name: value for name, value in values.items() if not self.get(name)}
        return self.overlay(filled), filled

    def listed(self, variable: Variable) -> frozenset[str]:
        """A comma-separated variable's entries."""
        return frozenset(
            entry.strip() for entry in (self.get(variable) or "").split(",") if entry.strip()
        )

    def artifact_root(self, chosen: Path | None = None) -> Path:
        """The artifact root, resolved: ``chosen`` (``--artifacts``), else ``SOCIETY_ARTIFACTS``,
        else ``./artifacts``. The one place it is decided."""
        return Path(chosen or self.get(ARTIFACTS) or DEFAULT_ARTIFACTS).resolve()

    def without_controller_settings(self) -> dict[str, str]:
        """The environment without the controller's own settings (the module's process)."""
        return {
            name: value
            for name, value in self.environ.items()
            if not name.startswith(CONTROLLER_PREFIXES)
        }


_installed: Settings | None = None


def install(settings: Settings) -> Settings:
    """Make ``settings`` this process's: what an entry point read, with its options applied."""
    global _installed
    _installed = settings
    return settings


@contextlib.contextmanager
def installed(settings: Settings) -> Iterator[Settings]:
    """``install`` for the block; the settings before it come back after it."""
    global _installed
    previous = _installed
    _installed = settings
    try:
        yield settings
    finally:
        _installed = previous


def current() -> Settings:
    """This process's settings: the entry point's, or (a library caller, a test) the
    environment as it is now."""
    return _installed if _installed is not None else Settings.read()


def take(variable: Variable) -> str | None:
    """Read and remove a handoff variable (a template's or model server's own), so that nothing
    this process starts inherits it."""
    return os.environ.pop(variable.name, None) or None
