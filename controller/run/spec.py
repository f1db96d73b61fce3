"""``RunSpec``: an experiment's id, closed event universe, exact roster and ``execute`` coroutine.

Everything about the definition is checked when it is defined, so a bad spec fails when its
module is loaded, before any ledger, router or agent exists.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from controller.agents.runtime import RuntimeDescriptor
from controller.errors import SetupError
from controller.events import core_events
from controller.network.limits import DEFAULT_MESSAGE_LIMITS, MessageLimits
from ledger.errors import CatalogError
from ledger.events import TAG_PATTERN, Event, EventCatalog
from society_sandbox.runtimes.llm import (
    GATEWAY_SOCKET_VARIABLE,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
)

if TYPE_CHECKING:
    from controller.run.context import RunContext

ROSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
RUN_SPEC_NAME = "run_spec"

Execute = Callable[["RunContext"], Awaitable[Any]]


class RunSpecError(SetupError):
    """A definition or its module is not valid; ``reason`` is machine-readable."""

    reason = "run-spec-invalid"


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One experiment. Build it with ``RunSpec.define``; a module's ``run_spec`` is the one it runs
    (other RunSpecs beside it, helpers it is built from, are allowed).

    ``events`` holds only the customer classes (what ``ctx.events`` may emit); ``catalog`` is the
    run's whole event universe: core + customer + what the runtimes contribute.
    """

    id: str
    events: EventCatalog
    agents: Mapping[str, RuntimeDescriptor]
    execute: Execute
    catalog: EventCatalog
    defined_in: str | None = field(default=None, repr=False)
    """The ``__name__`` of the module whose code called ``define``."""
    parameters: type[BaseModel] | None = None
    """The pydantic model of the run's parameters (``society run --set KEY=VALUE``), if any."""
    message_limits: MessageLimits = DEFAULT_MESSAGE_LIMITS
    """What each agent may send: the router refuses sends over it (``rate-limited``)."""

    @classmethod
    def define(
        cls,
        *,
        id: str,
        agents: Mapping[str, RuntimeDescriptor],
        execute: Execute,
        events: Iterable[EventCatalog | type[Event]] = (),
        parameters: type[BaseModel] | None = None,
        message_limits: MessageLimits = DEFAULT_MESSAGE_LIMITS,
    ) -> RunSpec:
        """Check and freeze a definition; raises ``RunSpecError`` or ``CatalogError``.

        ``message_limits`` is each agent's message rate and volume (``MessageLimits``: 50
        messages a second, bursts of 200; 256 KiB a second, bursts of 2 MiB, by default).

        ``parameters`` is a pydantic model whose fields all have defaults: the program reads
        ``ctx.parameters`` (an instance), and ``society run --set KEY=VALUE`` sets its fields.
        """
        if not isinstance(id, str) or not TAG_PATTERN.match(id):
            raise RunSpecError(
                f"RunSpec id {id!r} must be versioned like an event tag, e.g. "
                f"'acme.negotiation/v1'",
                reason="bad-id",
            )
        roster = _check_roster(agents)
        if not inspect.iscoroutinefunction(execute):
            raise RunSpecError(
                f"execute must be an 'async def' taking the run context, got {execute!r}",
                reason="execute-not-async",
            )
        customer = EventCatalog.merge(*(_as_catalog(item) for item in events))
        core_tags = [tag for tag in customer.tags if tag in core_events]
        if core_tags:
            raise CatalogError(
                f"the customer catalogs list core event tags {core_tags}; the kernel writes "
                f"those itself, list only your own classes",
                reason="core-event-in-customer-catalog",
            )
        ours = [tag for tag in customer.tags if tag.startswith(RESERVED_TAG_NAMESPACE)]
        if ours:
            # a shipped runtime's tags belong to it: a module declaring one could emit forged
            # usage or configuration records that a grader would read as the runtime's own
            raise CatalogError(
                f"the customer catalogs list {ours}, in Society Runner's own namespace "
                f"{RESERVED_TAG_NAMESPACE!r}; only the kernel and the runtimes write those: give "
                "your own events a namespace of yours, such as 'acme.'",
                reason="reserved-event-namespace",
            )
        _check_parameters(parameters)
        runtime_catalogs = [descriptor.events for descriptor in roster.values()]
        catalog = EventCatalog.merge(core_events, customer, *runtime_catalogs)
        _check_named_events(execute, catalog)
        caller = sys._getframe(1).f_globals.get("__name__")
        return cls(
            id=id,
            events=customer,
            agents=roster,
            execute=execute,
            catalog=catalog,
            defined_in=caller if isinstance(caller, str) else None,
            parameters=parameters,
            message_limits=_check_message_limits(message_limits),
        )

    def parameters_from(self, values: Mapping[str, Any]) -> BaseModel | None:
        """The run's parameters: the model's defaults with ``values`` set over them; ``None`` for
        a spec without parameters and no values. Raises ``RunSpecError`` for values the model
        does not take."""
        if self.parameters is None:
            if values:
                raise RunSpecError(
                    f"{self.id} declares no parameters, so it takes no --set "
                    f"({', '.join(sorted(values))})",
                    reason="parameters-undeclared",
                    next_step="drop --set, or declare RunSpec.define(parameters=Model)",
                )
            return None
        try:
            return self.parameters.model_validate(dict(values))
        except ValidationError as invalid:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'parameters'}: {error['msg']}"
                for error in invalid.errors()
            )
            fields = ", ".join(self.parameters.model_fields)
            raise RunSpecError(
                f"parameters of {self.id} refused: {problems}",
                reason="parameters-invalid",
                next_step=f"pass --set KEY=VALUE for its fields ({fields})",
            ) from None

    def __repr__(self) -> str:
        return f"RunSpec(id={self.id!r}, agents={list(self.agents)})"


RESERVED_TAG_NAMESPACE = "society."
"""The core events' and the shipped runtimes' tags; a spec's own events never use it."""
SERVICE_VARIABLES = frozenset({GATEWAY_URL_VARIABLE, GATEWAY_SOCKET_VARIABLE, MODEL_VARIABLE})
"""Variables the run's services grant an agent (``controller.services``); no roster sets them."""


def _check_roster(agents: Mapping[str, RuntimeDescriptor]) -> Mapping[str, RuntimeDescriptor]:
    if not isinstance(agents, Mapping):
        raise RunSpecError("agents must map roster names to runtimes", reason="bad-roster")
    for name, descriptor in agents.items():
        if not isinstance(name, str) or not ROSTER_NAME.match(name):
            raise RunSpecError(
                f"roster name {name!r} must match {ROSTER_NAME.pattern} (lowercase, digits and "
                f"'-', starting with a letter)",
                reason="bad-roster-name",
            )
        if not isinstance(descriptor, RuntimeDescriptor):
            raise RunSpecError(
                f"agent {name!r} is {descriptor!r}, not a runtime descriptor such as "
                f"controller.agents.scripted(...)",
                reason="bad-runtime",
            )
        granted = sorted(set(descriptor.environment) & SERVICE_VARIABLES)
        if granted:
            raise RunSpecError(
                f"agent {name!r} sets {', '.join(granted)}, which the run's services grant (the "
                "model gateway's address and model); a roster cannot name them",
                reason="service-variable",
                next_step="drop them: an llm agent gets its run's gateway by itself",
            )
    return MappingProxyType(dict(agents))


def _check_message_limits(limits: object) -> MessageLimits:
    if not isinstance(limits, MessageLimits):
        raise RunSpecError(
            f"message_limits must be a MessageLimits, got {type(limits).__name__}",
            reason="bad-message-limits",
            next_step="pass controller.network.limits.MessageLimits(...)",
        )
    return limits


def _check_named_events(execute: Callable[..., Any], catalog: EventCatalog) -> None:
    """Refuse, when the spec is defined, an event class that ``execute`` (or a function of its
    module that it calls by name) names and the catalog lacks: emitting it would fail mid-run,
    and reading it finds nothing. What the code reaches only at run time is checked by ``emit``."""
    seen: set[int] = set()
    pending: list[Any] = [execute]
    while pending:
        function = inspect.unwrap(pending.pop())
        code = getattr(function, "__code__", None)
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        names: set[str] = set()
        codes = [code]
        while codes:
            current = codes.pop()
            names.update(current.co_names)
            codes.extend(c for c in current.co_consts if inspect.iscode(c))
        module_globals = getattr(function, "__globals__", {})
        for name in sorted(names):
            value = module_globals.get(name)
            if isinstance(value, type) and issubclass(value, Event) and value is not Event:
                if getattr(value, "tag", None) is not None and value not in catalog:
                    raise RunSpecError(
                        f"execute names {value.__qualname__} ({value.tag}), an event class this "
                        "RunSpec does not declare: emitting it would fail mid-run",
                        reason="undeclared-event",
                        next_step=(
                            f"list it in RunSpec.define(events=[..., {value.__qualname__}])"
                        ),
                    )
            elif inspect.isfunction(value) and value.__module__ == function.__module__:
                pending.append(value)


def _check_parameters(parameters: object) -> None:
    if parameters is None:
        return
    if not (inspect.isclass(parameters) and issubclass(parameters, BaseModel)):
        raise RunSpecError(
            f"parameters must be a pydantic model class, got {parameters!r}",
            reason="bad-parameters",
        )
    required = [name for name, info in parameters.model_fields.items() if info.is_required()]
    if required:
        raise RunSpecError(
            f"parameters {parameters.__name__} has fields without a default "
            f"({', '.join(required)}); a run without --set uses the defaults, so give each one",
            reason="bad-parameters",
        )
    if parameters.model_config.get("extra") != "forbid":
        raise RunSpecError(
            f"parameters {parameters.__name__} must forbid unknown fields "
            "(model_config = ConfigDict(extra='forbid')), so a misspelt --set is refused",
            reason="bad-parameters",
        )


def _as_catalog(item: EventCatalog | type[Event]) -> EventCatalog:
    if isinstance(item, EventCatalog):
        return item
    return EventCatalog.make(item)


class NotAPythonModule(ImportError):
    """The file has no loader: it is not a Python module."""


def exec_module_file(module_path: Path, name: str) -> ModuleType:
    """Import the file at ``module_path`` as ``sys.modules[name]``, its folder importable while it
    loads (its sibling modules import as under ``python MODULE.py``); on failure, forget it and
    re-raise (``NotAPythonModule`` when the file cannot be loaded at all)."""
    spec = importlib.util.spec_from_file_location(name, module_path)
    if spec is None or spec.loader is None:
        raise NotAPythonModule(f"{module_path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(module_path.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module


def load_run_spec(path: str | Path) -> RunSpec:
    """Import the module at ``path`` (its folder importable while it loads) and return its
    module-level ``run_spec``."""
    module_path = Path(path).resolve()
    if not module_path.is_file():
        raise RunSpecError(f"no RunSpec module at {module_path}", reason="module-not-found")
    digest = hashlib.sha256(str(module_path).encode()).hexdigest()[:12]
    name = f"_society_spec_{module_path.stem.replace('-', '_')}_{digest}"
    try:
        module = exec_module_file(module_path, name)
    except NotAPythonModule as exc:
        raise RunSpecError(str(exc), reason="module-not-found") from None
    except RunSpecError:
        raise
    except (Exception, SystemExit) as exc:
        raise RunSpecError(
            f"importing {module_path} failed before anything started: {_failure(exc, module_path)}",
            reason="module-import-failed",
        ) from exc
    run_spec = getattr(module, RUN_SPEC_NAME, None)
    if run_spec is None:
        raise RunSpecError(
            f"{module_path} defines no module-level '{RUN_SPEC_NAME}'; add "
            f"'{RUN_SPEC_NAME} = RunSpec.define(...)'",
            reason="no-run-spec",
        )
    if not isinstance(run_spec, RunSpec):
        raise RunSpecError(
            f"'{RUN_SPEC_NAME}' in {module_path} is {type(run_spec).__name__}, not a RunSpec",
            reason="no-run-spec",
        )
    _check_not_shadowed(module, module_path, run_spec)
    return run_spec


def _check_not_shadowed(module: ModuleType, module_path: Path, run_spec: RunSpec) -> None:
    """Refuse a ``run_spec`` imported from elsewhere while the module defines RunSpecs of its own:
    the module's own experiment would silently not run. Any other RunSpec beside a ``run_spec``
    the module defines itself (a helper it is built from, an imported baseline) is allowed."""
    if run_spec.defined_in == module.__name__:
        return
    own = sorted(
        key
        for key, value in vars(module).items()
        if isinstance(value, RunSpec) and value is not run_spec
        if value.defined_in == module.__name__
    )
    if own:
        origin = sys.modules.get(run_spec.defined_in or "")
        where = getattr(origin, "__file__", None) or run_spec.defined_in or "another module"
        raise RunSpecError(
            f"'{RUN_SPEC_NAME}' in {module_path} is {run_spec.id!r}, defined in {where}, while "
            f"the module defines its own RunSpec ({', '.join(own)}), which would not run; name the "
            f"one to run '{RUN_SPEC_NAME}' (e.g. '{RUN_SPEC_NAME} = {own[0]}') and import the "
            f"other under another name",
            reason="run-spec-imported",
        )


def _failure(exc: BaseException, module_path: Path) -> str:
    """The exception in one line, where in the module's folder it was raised, and, for a module
    that cannot be found, which interpreter looked for it."""
    if isinstance(exc, SyntaxError):  # one line, naming the file and the line itself
        return f"{type(exc).__name__}: {exc}"
    summary = "".join(traceback.format_exception_only(exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).parent == module_path.parent] or frames[-1:]
    if ours:
        summary += f" ({Path(ours[-1].filename).name}:{ours[-1].lineno})"
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        summary += (
            f"; {exc.name!r} is not installed for {sys.executable}, the interpreter society runs "
            f"(nor beside the module): install the package that provides it there "
            f"({sys.executable} -m pip install ...)"
        )
    return summary
