"""``RunSpec``: an experiment's id, closed event universe, exact roster and ``execute`` coroutine.

Everything about the definition is checked when it is defined, so a bad spec fails when its
module is loaded, before any ledger, router or agent exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

from controller.agents.runtime import RuntimeDescriptor
from controller.events import core_events
from ledger.errors import CatalogError
from ledger.events import TAG_PATTERN, Event, EventCatalog

if TYPE_CHECKING:
    from controller.run.context import RunContext

ROSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
RUN_SPEC_NAME = "run_spec"

Execute = Callable[["RunContext"], Awaitable[Any]]


class RunSpecError(Exception):
    """A definition or its module is not valid; ``reason`` is machine-readable."""

    def __init__(self, detail: str, *, reason: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One experiment. Build it with ``RunSpec.define``; a module defines exactly one ``run_spec``.

    ``events`` holds only the customer classes (what ``ctx.events`` may emit); ``catalog`` is the
    run's whole event universe: core + customer + what the runtimes contribute.
    """

    id: str
    events: EventCatalog
    agents: Mapping[str, RuntimeDescriptor]
    execute: Execute
    catalog: EventCatalog

    @classmethod
    def define(
        cls,
        *,
        id: str,
        agents: Mapping[str, RuntimeDescriptor],
        execute: Execute,
        events: Iterable[EventCatalog | type[Event]] = (),
    ) -> RunSpec:
        """Check and freeze a definition; raises ``RunSpecError`` or ``CatalogError``."""
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
        runtime_catalogs = [descriptor.events for descriptor in roster.values()]
        catalog = EventCatalog.merge(core_events, customer, *runtime_catalogs)
        return cls(id=id, events=customer, agents=roster, execute=execute, catalog=catalog)

    def __repr__(self) -> str:
        return f"RunSpec(id={self.id!r}, agents={list(self.agents)})"


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
    return MappingProxyType(dict(agents))


def _as_catalog(item: EventCatalog | type[Event]) -> EventCatalog:
    if isinstance(item, EventCatalog):
        return item
    return EventCatalog.make(item)


class NotAPythonModule(ImportError):
    """The file has no loader: it is not a Python module."""


def exec_module_file(module_path: Path, name: str) -> ModuleType:
    """Import the file at ``module_path`` as ``sys.modules[name]``; on failure, forget it and
    re-raise (``NotAPythonModule`` when the file cannot be loaded at all)."""
    spec = importlib.util.spec_from_file_location(name, module_path)
    if spec is None or spec.loader is None:
        raise NotAPythonModule(f"{module_path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_run_spec(path: str | Path) -> RunSpec:
    """Import the module at ``path`` and return its one module-level ``run_spec``."""
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
        summary = "".join(traceback.format_exception_only(exc)).strip()
        raise RunSpecError(
            f"importing {module_path} failed before anything started: {summary}",
            reason="module-import-failed",
        ) from exc
    found = [value for value in vars(module).values() if isinstance(value, RunSpec)]
    distinct = list({id(value): value for value in found}.values())
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
    if len(distinct) > 1:
        names = sorted(key for key, value in vars(module).items() if isinstance(value, RunSpec))
        raise RunSpecError(
            f"{module_path} defines {len(distinct)} RunSpecs ({', '.join(names)}); a module "
            f"defines exactly one, named '{RUN_SPEC_NAME}'",
            reason="multiple-run-specs",
        )
    return run_spec
