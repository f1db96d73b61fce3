"""The programs ``society cluster up`` drives, found before any step runs; each one missing is
named with the command that installs it, all at once (not one per attempt)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.errors import OpsError
from controller.ops.checks import tools
from controller.settings import KIND_DIR, current

KIND_VERSION = "v0.33.0"
"""The kind release ``cluster up`` drives, the one the test cluster is made with."""


@dataclass(frozen=True, slots=True)
class Missing:
    """One program that is not there, and the next step that installs it."""

    tool: str
    next_step: str
    problem: str = "not found"

    def line(self) -> str:
        return f"{self.tool}: {self.problem}; {self.next_step}"


class PrerequisitesMissing(OpsError):
    """``cluster up`` cannot start; ``missing`` lists every absent program with its next step."""

    reason = "prerequisite-missing"

    def __init__(
        self,
        detail: str,
        *,
        reason: str | None = None,
        next_step: str | None = None,
        missing: Sequence[Missing],
    ) -> None:
        super().__init__(detail, reason=reason, next_step=next_step)
        self.missing = list(missing)


NEXT_STEPS = {
    "container engine": "install Docker (https://docs.docker.com/engine/install/) or Podman "
    "(`sudo apt-get install podman`); kind runs its nodes as containers",
    "kind": "`scripts/install-kind.sh` (builds kind "
    f"{KIND_VERSION} from the Go module proxy into {{kind_dir}} and installs what kind's podman "
    f"provider needs here; `cluster up` finds it there), or `go install "
    f"sigs.k8s.io/kind@{KIND_VERSION}` and put it on PATH",
    "kubectl": "install kubectl 1.36 (https://kubernetes.io/docs/tasks/tools/) and put it on PATH",
    "helm": f"`{tools.BUILD_COMMAND}` (builds the pinned helm into {{tools}}/bin), or put a "
    "helm v4 on PATH",
    "ctr": "put containerd's `ctr` on PATH (it imports the images into each node's containerd)",
}


@dataclass(frozen=True, slots=True)
class Programs:
    """Where each program is (``None`` when not needed in this mode)."""

    helm: Path
    kubectl: Path | None = None
    kind: Path | None = None
    engine: Path | None = None
    """``docker`` or ``podman`` (kind's node provider)."""
    ctr: Path | None = None


Finder = Callable[[str], str | None]
VersionOf = Callable[[Path], str]
Answers = Callable[[Path], bool]


def engine_answers(engine: Path) -> bool:
    """Whether the container engine's daemon (or podman's service) answers ``info``."""
    try:
        done = subprocess.run(
            [str(engine), "info"], capture_output=True, timeout=20, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def kind_dir() -> Path:
    """Where ``scripts/install-kind.sh`` puts kind: ``SOCIETY_KIND_DIR/<version>/bin``."""
    chosen = current().get(KIND_DIR)
    base = Path(chosen) if chosen else Path.home() / ".cache" / "society-runner" / "kind"
    return base / KIND_VERSION / "bin"


def kind_version(kind: Path) -> str:
    """What ``kind version`` says (``kind v0.33.0 go1.24 linux/amd64``), or why it said nothing."""
    try:
        done = subprocess.run([str(kind), "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unusable ({exc})"
    return (done.stdout or done.stderr).strip() or f"unusable (exit {done.returncode})"


def find_programs(
    *,
    existing_cluster: bool,
    import_images: bool,
    provider: str | None = None,
    which: Finder = shutil.which,
    version_of: VersionOf = kind_version,
    answers: Answers = engine_answers,
) -> Programs:
    """The programs this mode needs; ``PrerequisitesMissing`` names each absent one.

    Creating a kind cluster needs a container engine, kind, kubectl (the upstream Kueue and
    Agent Sandbox manifests) and helm; installing into an existing cluster needs helm, and
    ``ctr`` when images are imported into nodes' containerd. kind's node ``provider`` is
    ``docker`` or ``podman``: by default Docker when on PATH and its daemon answers, else
    Podman, so a ``docker`` CLI with no daemon behind it does not stand in the way.
    """
    missing: list[Missing] = []

    def need(name: str, *candidates: str) -> Path | None:
        for candidate in candidates:
            found = _helm(which) if candidate == "helm" else which(candidate)
            if candidate == "kind" and not found:
                found = _installed_kind()
            if found:
                return Path(found)
        next_step = NEXT_STEPS[name].replace("{tools}", str(tools.tools_dir()))
        missing.append(Missing(name, next_step.replace("{kind_dir}", str(kind_dir()))))
        return None

    helm = need("helm", "helm")
    kind = None if existing_cluster else need("kind", "kind")
    if kind is not None:
        said = version_of(kind)
        if KIND_VERSION not in said.split():
            problem = (f"{kind} is `{said}`, not {KIND_VERSION} (the release the kind profile "
                       "is tested with)")  # fmt: skip
            missing.append(
                Missing("kind", NEXT_STEPS["kind"].replace("{kind_dir}", str(kind_dir())), problem)
            )
    engine = None
    if not existing_cluster:
        engine = need("container engine", *([provider] if provider else ["docker", "podman"]))
        if engine is not None and provider is None and engine.name == "docker":
            podman = which("podman")
            if not answers(engine):
                if podman:
                    engine = Path(podman)  # a docker CLI whose daemon does not answer
                else:
                    missing.append(Missing(
                        "container engine",
                        "start the Docker daemon, or install Podman (`sudo apt-get install "
                        "podman`) and pass --provider podman",
                        f"{engine} is there but its daemon does not answer `docker info`",
                    ))  # fmt: skip
    programs = Programs(
        helm=helm or Path("helm"),
        kubectl=None if existing_cluster else need("kubectl", "kubectl"),
        kind=kind,
        engine=engine,
        ctr=need("ctr", "ctr") if import_images else None,
    )
    if missing:
        names = ", ".join(item.tool for item in missing)
        lines = "\n".join(f"  - {item.line()}" for item in missing)
        raise PrerequisitesMissing(
            f"missing {names}; nothing was changed. Install them and retry:\n{lines}",
            missing=missing,
        )
    return programs


def _installed_kind() -> str | None:
    """kind where ``scripts/install-kind.sh`` put it."""
    built = kind_dir() / "kind"
    return str(built) if os.access(built, os.X_OK) else None


def _helm(which: Finder) -> str | None:
    """helm on PATH, else the pinned build of ``scripts/build-tools.sh``."""
    found = which("helm")
    if found:
        return found
    built = tools.tools_dir() / "bin" / "helm"
    return str(built) if os.access(built, os.X_OK) else None
