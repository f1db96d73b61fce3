"""A finished run's own events, decoded by the module the run kept, in that module's sandbox.

A run directory keeps its module (``module/``). A reader (``society ledger verify`` or ``show``
of a run directory, without ``--catalog``) decodes the run's own events with it: the module is
imported by its sandboxed process (as ``society run`` imports it: it never runs in the reader's
process), and each recorded event of its tags is checked there by the module's own class. A
module that cannot be imported or sandboxed leaves those events undecoded, as before, with the
reason said once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ConfigDict, model_validator

from ledger.events import Event, EventCatalog


class _KeptEvent(Event):
    """A module event class as a reader holds it: any fields, checked by the module's own class
    in the module's process (``checker``) as each record is decoded."""

    model_config = ConfigDict(extra="allow", frozen=True)
    checker: ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _checked_there(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.checker is not None:
            refused = cls.checker({**data, "tag": cls.tag})
            if refused is not None:
                raise ValueError(f"the run's kept module refuses it: {refused}")
        return data


MODULE_DIRECTORY = "module"


def kept_module(run_dir: Path) -> Path | None:
    """The one module a run directory kept, if it kept one."""
    kept = sorted((run_dir / MODULE_DIRECTORY).glob("*.py"))
    return kept[0] if len(kept) == 1 else None


@contextlib.contextmanager
def kept_catalog(run_dir: Path, module: Path) -> Iterator[EventCatalog]:
    """The module's own event classes, each checking records in the module's sandboxed process,
    for the block. The process reads the module's folder only, never the artifact root around
    it. Raises what importing the module raises (``RunSpecError``, ...)."""
    from anyio.from_thread import start_blocking_portal

    from controller.program.child import module_folders
    from controller.program.process import isolated_module

    folders = module_folders(module, (), (), (run_dir.parent,))
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(isolated_module(module, folders=folders)) as spec:
            process = spec.process
            classes = []
            for tag in spec.events.tags:
                name = "KeptEvent_" + "".join(c if c.isalnum() else "_" for c in tag)
                checker = staticmethod(lambda wire: process.check_event(wire, strict=True))
                body = {"tag": tag, "checker": checker, "__module__": __name__}
                classes.append(type(name, (_KeptEvent,), body))
            yield EventCatalog.make(*classes)
