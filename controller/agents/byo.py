"""The ``byo`` runtime, controller side: any agent program a researcher brings, as data.

The program (``command``, an argv) runs in the agent's sandbox behind a launcher
(``agent_images.byo``) that serves its owner handle and, in ``stdio`` mode, is its router
session (``society_sandbox.runtimes.byo`` holds the frames). Granted a model (``provider``),
it reaches the run's model gateway through a loopback relay the launcher serves, with the
variables stock SDKs read (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` and their keys, the
agent's own gateway token); every call is metered and budgeted as an ``llm`` agent's. Every
field is data from an untrusted module, checked here before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from controller.agents.bridge import BridgeOwner, OwnerError, attach_bridge
from controller.agents.llm import granted_provider
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
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.events import model_gateway_catalog
from controller.modelgateway.service import MODEL_SERVICE
from ledger.events import EventCatalog
from society_sandbox.runtimes.byo import (
    BYO_CONFIG_FILE,
    MAX_ARG_CHARS,
    MAX_ARGS,
    BYOSettings,
)
from society_sandbox.runtimes.llm import (
    GATEWAY_SOCKET_VARIABLE,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
)

BYO_IMAGE = "society/python:dev"
"""The project's Python image; cluster profiles need it pinned by digest."""
BYO_COMMAND = ("python", "-m", "agent_images.byo")
BYO_RESOURCES = Resources(cpu=0.1, memory_mib=128, memory_limit_mib=4096)
"""A stock SDK or a Node program maps more address space than the Python runtimes need."""
RUNTIME_PREFIXES = ("OPENAI_", "ANTHROPIC_", "MODEL_")
"""Variables the runtime sets itself (the model relay, the gateway's grant)."""
SERVICE_GRANTED = frozenset({GATEWAY_URL_VARIABLE, GATEWAY_SOCKET_VARIABLE, MODEL_VARIABLE})
"""The model service's grant (``RunSpec.define`` refuses a roster naming them)."""
MAX_VALUE_CHARS = 32 * 1024
MAX_ARGV_CHARS = 64 * 1024


class BYOOwner(BridgeOwner):
    """A program agent's owner handle: ``state()``, ``instruct(text)`` (stdio mode), ``stop()``."""

    async def instruct(self, text: str) -> None:
        """Hand a stdio program an ``instruction`` line; a client-mode program refuses it
        (``not-offered``): it has no channel the launcher speaks on."""
        await self._call("instruct", text=text, peers=[])

    async def stop(self, *, reason: str = "owner") -> None:
        """Ask the program to end: a ``stop`` line in stdio mode, SIGTERM in client mode."""
        await self._call("stop", reason=reason)


@dataclass(frozen=True, eq=False, kw_only=True)
class BYORuntime(RuntimeDescriptor):
    """Any agent program: ``program`` runs in the sandbox behind the launcher."""

    runtime: ClassVar[str] = "byo"

    program: tuple[str, ...]
    """The program's argv (``("python", "agent.py")``, ``("node", "agent.mjs")``)."""
    mode: Literal["client", "stdio"] = "client"
    provider: ProviderConfig | None = None
    """The granted model's provider; ``None`` with ``model_granted``: the run's local model."""
    model_granted: bool = False
    token_budget: int | None = None
    image: str = BYO_IMAGE
    command: tuple[str, ...] = BYO_COMMAND
    resources: Resources = BYO_RESOURCES
    term_grace_s: float = 5.0
    events: EventCatalog = field(default_factory=lambda: model_gateway_catalog)

    def __post_init__(self) -> None:
        check_program_environment(self.environment)
        super().__post_init__()
        check_argv(self.program)
        check_mode(self.mode)
        if self.token_budget is not None and self.token_budget <= 0:
            raise RuntimeDescriptorError(
                f"token_budget is {self.token_budget}; give a positive number of tokens",
                reason="bad-option",
            )

    @property
    def model_provider(self) -> ProviderConfig | None:
        return self.provider

    @property
    def model_token_budget(self) -> int | None:
        return self.token_budget

    def attach(self, access: SandboxAccess) -> AbstractAsyncContextManager[Attachment[BYOOwner]]:
        return attach_bridge(access, BYOOwner, runtime="byo", timeout_s=self.ready_timeout_s)

    async def stop(self, owner: Any) -> None:
        try:
            await owner.stop(reason="run-teardown")
        except OwnerError:
            pass


def check_program_environment(environment: Mapping[str, str]) -> None:
    """The base checks' names plus the runtime's own (``OPENAI_*``, ``ANTHROPIC_*``, ``MODEL_*``),
    and bounded values."""
    for name, value in environment.items():
        granted = name in SERVICE_GRANTED  # the run's services add them; a roster cannot
        if isinstance(name, str) and name.upper().startswith(RUNTIME_PREFIXES) and not granted:
            raise RuntimeDescriptorError(
                f"environment variable {name} is set by the program runtime itself (the model "
                "relay's address and the agent's own gateway token)",
                reason="reserved-variable",
                next_step="grant the model with byo(..., provider='local') instead",
            )
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise RuntimeDescriptorError(
                f"environment variable {name}'s value is {len(value):,} characters; at most "
                f"{MAX_VALUE_CHARS:,}",
                reason="bad-variable",
            )


def check_mode(mode: object) -> None:
    if mode not in ("client", "stdio"):
        raise RuntimeDescriptorError(
            f"mode is {mode!r}; give 'client' (the program connects to the router itself) or "
            "'stdio' (JSON lines on its stdin and stdout)",
            reason="bad-option",
        )


def check_argv(argv: object) -> None:
    """A non-empty tuple of at most ``MAX_ARGS`` strings, each non-empty, without NUL, at most
    ``MAX_ARG_CHARS``; ``MAX_ARGV_CHARS`` in all."""
    if not isinstance(argv, tuple) or not argv or len(argv) > MAX_ARGS:
        raise RuntimeDescriptorError(
            f"command is {argv!r:.200}; give a tuple of 1 to {MAX_ARGS} strings, e.g. "
            "('python', 'agent.py')",
            reason="bad-command",
        )
    for arg in argv:
        if not isinstance(arg, str) or not arg or "\x00" in arg or len(arg) > MAX_ARG_CHARS:
            raise RuntimeDescriptorError(
                f"command argument {arg!r:.80} is not a non-empty string without NUL of at most "
                f"{MAX_ARG_CHARS:,} characters",
                reason="bad-command",
                next_step="put long inputs in the program's files",
            )
    if sum(len(arg) for arg in argv) > MAX_ARGV_CHARS:
        raise RuntimeDescriptorError(
            f"command holds more than {MAX_ARGV_CHARS:,} characters",
            reason="bad-command",
            next_step="put long inputs in the program's files",
        )


@checked_options
def byo(
    command: tuple[str, ...],
    *,
    mode: Literal["client", "stdio"] = "client",
    files: Mapping[str, str | bytes | Path] | None = None,
    packages: tuple[str, ...] = (),
    environment: Mapping[str, str] | None = None,
    provider: str | ProviderConfig | None = None,
    model: str | None = None,
    token_budget: int | None = 20_000,
    image: str = BYO_IMAGE,
    resources: Resources | None = None,
    harvest: Harvest | None = None,
    ready_timeout_s: float = 60.0,
    term_grace_s: float = 5.0,
) -> BYORuntime:
    """An agent that is ``command`` run in its working directory, which holds ``files``.

    ``mode``: ``"client"``, the program connects to the router with
    ``society_sandbox.network.client``; ``"stdio"``, it reads and writes JSON lines.
    ``provider`` grants a model (``"local"``: the run's SmolLM2; a named provider with ``model``;
    a ``ProviderConfig``), metered and limited to ``token_budget`` tokens by the run's gateway.
    ``packages`` (PEP 508) are checked before the run starts. Its files are harvested.
    """
    check_argv(command)
    check_mode(mode)
    given = {
        path: file_bytes(f"program file {path}", content, "program-file-missing")
        for path, content in (files or {}).items()
    }
    if BYO_CONFIG_FILE in given:
        raise RuntimeDescriptorError(
            f"{BYO_CONFIG_FILE} is written from byo()'s arguments", reason="bad-path"
        )
    packages = check_packages(packages)
    granted = provider is not None
    chosen = granted_provider(provider, model) if provider is not None else None
    settings = BYOSettings(command=command, mode=mode, packages=packages, model=granted)
    written = {BYO_CONFIG_FILE: settings.model_dump_json(indent=2).encode()}
    return BYORuntime(
        program=command,
        mode=mode,
        provider=chosen,
        model_granted=granted,
        token_budget=token_budget if granted else None,
        image=image,
        resources=resources or BYO_RESOURCES,
        environment=dict(environment or {}),
        files={**given, **written},
        harvest=harvest or Harvest(files=(*sorted(given), BYO_CONFIG_FILE)),
        ready_timeout_s=ready_timeout_s,
        term_grace_s=term_grace_s,
        packages=packages,
        services=(MODEL_SERVICE,) if granted else (),
    )


__all__ = ["BYOOwner", "BYORuntime", "byo"]
