"""Runtime descriptors: what a platform needs to start one agent, and the bridge attaching to it.

A descriptor owns its container entrypoint (image, command, environment, files, credentials by
reference, resources, bridge port, what to harvest) and its controller-side bridge
(``attach``). Platforms read the first half; the kernel calls ``attach`` once the sandbox runs.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar

from controller.agents.termination import Observation, ProcessExit, Termination
from controller.errors import SocietyError
from controller.services import RunService
from ledger.events import Event, EventCatalog
from society_sandbox.packages import BadRequirement, check_requirement

G = TypeVar("G")

_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Control, format (bidi), surrogate and line/paragraph separator characters."""
MAX_PATH_CHARS = 1024
_DIGEST_PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")


LOADER_VARIABLES = frozenset(
    {
        # glibc's list of variables that steer the dynamic loader and its helpers
        "GCONV_PATH",
        "GETCONF_DIR",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
        # what a shell or an interpreter runs or loads before the program
        "BASH_ENV",
        "ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONPLATLIBDIR",
        "PYTHONEXECUTABLE",
        "NODE_OPTIONS",
        "NODE_PATH",
    }
)
"""Variables that make a program load or run code other than its own; a descriptor names none."""
LOADER_PREFIXES = ("LD_", "MALLOC_")
RESERVED_PREFIXES = ("SOCIETY_",)
"""The boot contract's and the controller's own variables."""
MAX_TERM_GRACE_S = 300.0
"""The longest an agent may take to end after SIGTERM before it is killed."""


def check_environment_name(name: object) -> None:
    """Refuse a variable a descriptor may not set: not a plain name, reserved for the platform, or
    one that steers a loader or an interpreter (``RuntimeDescriptorError`` with its reason)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
        raise RuntimeDescriptorError(
            f"environment variable name {name!r} is not a plain name (letters, digits, '_')",
            reason="bad-variable",
        )
    if name.startswith(RESERVED_PREFIXES):
        raise RuntimeDescriptorError(
            f"environment variable {name} is reserved for the platform",
            reason="reserved-variable",
        )
    if name.upper() in LOADER_VARIABLES or name.upper().startswith(LOADER_PREFIXES):
        raise RuntimeDescriptorError(
            f"environment variable {name} makes a loader or an interpreter run other code; a "
            "descriptor may not set it",
            reason="loader-variable",
            next_step="put what the program needs in its files and command instead",
        )


class RuntimeDescriptorError(SocietyError):
    """A runtime descriptor is malformed or its bridge failed; ``reason`` is machine-readable."""

    reason = "runtime-failed"


def file_bytes(what: str, content: str | bytes | Path, reason: str) -> bytes:
    """A descriptor's file as bytes: text encoded, a ``Path`` read now (``RuntimeDescriptorError``
    with ``reason``, naming ``what``, when it cannot be)."""
    if isinstance(content, Path):
        try:
            return content.read_bytes()
        except OSError as exc:
            raise RuntimeDescriptorError(
                f"{what} reads {content}, which cannot be read ({exc.strerror or exc}); fix the "
                "path",
                reason=reason,
            ) from None
    return content.encode() if isinstance(content, str) else content


_P = ParamSpec("_P")
_R = TypeVar("_R")


def checked_options(factory: Callable[_P, _R]) -> Callable[_P, _R]:
    """``factory`` (``llm``, ``scripted``, ...), refusing an option it does not have with a typed
    error that names the nearest one it does (``unknown-option``), where Python would raise a
    bare ``TypeError``."""
    options = [
        parameter.name
        for parameter in inspect.signature(factory).parameters.values()
        if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]

    @functools.wraps(factory)
    def build(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        for name in kwargs:
            if name not in options:
                near = difflib.get_close_matches(name, options, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise RuntimeDescriptorError(
                    f"{factory.__name__}() has no option {name!r}; {hint}its options: "
                    f"{', '.join(options)}",
                    reason="unknown-option",
                )
        return factory(*args, **kwargs)

    return build


@dataclass(frozen=True, slots=True)
class Resources:
    """What an agent asks of the platform (admission) and may use at most (limits)."""

    cpu: float = 0.1
    """Cores requested; the local profile admits by it, clusters also schedule by it."""
    memory_mib: int = 128
    """Memory requested, for admission."""
    memory_limit_mib: int = 1024
    """Address-space limit of the agent's process on the local profile; the container limit."""
    open_files: int = 1024

    def __post_init__(self) -> None:
        if self.cpu < 0 or self.memory_mib < 0 or self.memory_limit_mib < self.memory_mib:
            raise RuntimeDescriptorError(
                f"resources {self} are not valid: requests must be >= 0 and the memory limit "
                f"at least the request",
                reason="bad-resources",
            )


DEFAULT_RESOURCES = Resources()


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where the controller finds a credential's value; only this reference is ever recorded.

    ``env`` names a variable of the controller's own environment (local profile); ``secret`` and
    ``key`` name a Kubernetes Secret (cluster profiles).
    """

    env: str | None = None
    secret: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Harvest:
    """What to copy out of the sandbox before cleanup: workspace files and the process log."""

    files: tuple[str, ...] = ()
    """Paths relative to the agent's working directory."""
    logs: bool = True
    max_bytes: int = 4 * 1024 * 1024
    """Per file; a larger file is recorded as ``oversize`` and not copied."""

    def __post_init__(self) -> None:
        for path in self.files:
            _check_relative(path, "harvest path")


DEFAULT_HARVEST = Harvest()


@dataclass(frozen=True, slots=True)
class SandboxAccess:
    """What the platform hands a bridge: where the bridge port is, its token, the process exit."""

    agent: str
    bridge_host: str
    bridge_port: int
    bridge_token: str
    exit: Observation[ProcessExit]
    record: Callable[[Event], Awaitable[None]] | None = None
    """Set by the kernel: records one of the runtime's declared ``events`` in the run's ledger."""
    bridge_path: str | None = None
    """A Unix socket to reach the bridge at instead of ``bridge_host:bridge_port`` (a local
    sandbox, which has no network the controller shares)."""


@dataclass(frozen=True, slots=True)
class Attachment(Generic[G]):
    """A usable application: its owner handle and the observation of its termination."""

    owner: G
    termination: Observation[Termination]


@dataclass(frozen=True, eq=False, kw_only=True)
class RuntimeDescriptor(ABC):
    """Base of every runtime descriptor. Subclasses set ``runtime`` and implement ``attach``."""

    image: str
    command: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Relative path in the working directory -> content."""
    credentials: Mapping[str, SecretRef] = field(default_factory=dict)
    """Credential name -> reference; values reach the agent only through its secrets file."""
    resources: Resources = DEFAULT_RESOURCES
    bridge_port: int = 7400
    """The port the application serves its bridge on inside its sandbox."""
    harvest: Harvest = DEFAULT_HARVEST
    events: EventCatalog = field(default_factory=EventCatalog.make)
    """Event classes the runtime's bridge may record; merged into the run's catalog."""
    ready_timeout_s: float = 60.0
    """How long the application may take to become usable once its process started."""
    term_grace_s: float = 2.0
    """At teardown, how long the program may take to exit after SIGTERM before it is killed."""
    services: tuple[RunService, ...] = ()
    """What the agent needs once per run, shared (``controller.services``)."""
    packages: tuple[str, ...] = ()
    """Python distributions the program needs (PEP 508, e.g. ``"numpy>=1.26"``), checked against
    the environment the agent runs in before the run starts."""

    runtime: ClassVar[str]
    ends_when_asked: ClassVar[bool] = True
    """``stop`` can make the application end by itself, so teardown waits for that before it
    signals; a runtime whose owner cannot stop it (a peer) is signalled at once."""

    def __post_init__(self) -> None:
        if not self.command:
            raise RuntimeDescriptorError("a runtime needs a command", reason="no-command")
        for path in self.files:
            _check_relative(path, "file path")
        for name, value in self.environment.items():
            check_environment_name(name)
            if not isinstance(value, str) or "\x00" in value:
                raise RuntimeDescriptorError(
                    f"environment variable {name}'s value is not text without NUL",
                    reason="bad-variable",
                )
        if not 0 < self.bridge_port < 65536:
            raise RuntimeDescriptorError(
                f"bridge port {self.bridge_port} is out of range", reason="bad-port"
            )
        if not 0 < self.term_grace_s <= MAX_TERM_GRACE_S:
            raise RuntimeDescriptorError(
                f"term_grace_s is {self.term_grace_s}; give a number of seconds above 0 and at "
                f"most {MAX_TERM_GRACE_S:g}",
                reason="bad-option",
            )
        object.__setattr__(self, "packages", check_packages(self.packages))
        for service in self.services:
            if not isinstance(service, RunService) or not _hashable(service):
                raise RuntimeDescriptorError(
                    f"{service!r} is not a run service (a frozen dataclass subclassing RunService)",
                    reason="bad-service",
                )

    @property
    def image_pinned(self) -> bool:
        """Whether ``image`` names a digest (cluster profiles require it)."""
        return bool(_DIGEST_PINNED.search(self.image))

    def file_digests(self) -> dict[str, tuple[str, int]]:
        return {p: (hashlib.sha256(c).hexdigest(), len(c)) for p, c in sorted(self.files.items())}

    @abstractmethod
    def attach(self, access: SandboxAccess) -> AbstractAsyncContextManager[Attachment[Any]]:
        """Connect the bridge once the application is usable; leaving the block detaches it.

        Raise ``RuntimeDescriptorError`` when the application cannot become usable; the
        platform's exit observation says whether the process is still alive.
        """

    async def stop(self, owner: Any) -> None:
        """Ask the application to end by itself at teardown; the platform signals it after."""
        return None


def check_packages(packages: object) -> tuple[str, ...]:
    """``packages`` as a tuple of PEP 508 requirements; raises ``RuntimeDescriptorError``."""
    if isinstance(packages, str) or not isinstance(packages, tuple | list):
        raise RuntimeDescriptorError(
            f"packages is {packages!r}; give a tuple of requirements, e.g. ('numpy>=1.26',)",
            reason="bad-requirement",
        )
    for requirement in packages:
        try:
            check_requirement(requirement)
        except BadRequirement as exc:
            raise RuntimeDescriptorError(
                f"{exc}; give one such as 'numpy>=1.26'", reason="bad-requirement"
            ) from None
    return tuple(packages)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _check_relative(path: object, what: str) -> None:
    """A path relative to the working directory: no way out, nothing a terminal or a line
    reader would misread (checked segment by segment, not with a pattern)."""
    problem = _path_problem(path)
    if problem is not None:
        raise RuntimeDescriptorError(
            f"{what} {path!r} {problem}; name a file inside the working directory, e.g. "
            f"'notes/result.md'",
            reason="bad-path",
        )


def _path_problem(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "is not a non-empty string"
    if len(path) > MAX_PATH_CHARS:
        return f"is longer than {MAX_PATH_CHARS} characters"
    bad = next((c for c in path if unicodedata.category(c) in _UNPRINTABLE), None)
    if bad is not None:
        return f"holds the control or format character U+{ord(bad):04X}"
    if path.startswith("/"):
        return "is absolute"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "has an empty, '.' or '..' segment"
    return None
