"""The catalog a ``society ledger`` reader decodes with: core events, the shipped runtimes' events,
and the events of a ``--catalog`` (or grader) module.

A reader may hold more event classes than a ledger declares, never fewer; so by default every
shipped runtime's catalog is merged and only customer events stay undecoded. ``--strict-catalog``
wants the exact set: then only the catalogs of the runtimes the ledger's roster names are merged.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from pydantic_core import from_json

from ledger import CatalogError, EventCatalog, LedgerError, ledger_catalog
from ledger.format import MANIFEST
from ledger.grading import catalog_of, load_module
from ledger.terminal import terminal_safe


def core_catalog() -> EventCatalog:
    """The kernel's events when ``controller.events`` is importable, else the ledger's own."""
    try:
        from controller.events import core_events
    except ImportError:
        return ledger_catalog
    return core_events


def shipped_runtime_catalogs() -> Mapping[str, EventCatalog]:
    """Each shipped runtime's name and the events it contributes to a run's catalog."""
    from controller.agents.shipped import shipped_runtime_catalogs as catalogs

    return catalogs()


def ledger_runtimes(ledger_dir: Path) -> list[str] | None:
    """The runtimes the manifest's roster names (None when it cannot be read: verify says why)."""
    try:
        manifest = from_json((ledger_dir / MANIFEST).read_bytes(), allow_inf_nan=False)
        roster = manifest["metadata"]["roster"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(roster, dict):
        return None
    return sorted({str(runtime) for runtime in roster.values()})


def reader_catalog(
    module_path: Path | None, *, runtimes: Iterable[str] | None = None
) -> EventCatalog:
    """Core + shipped runtimes' events (only ``runtimes``' when given) + the module's catalog."""
    shipped = shipped_runtime_catalogs()
    chosen = shipped.keys() if runtimes is None else [r for r in runtimes if r in shipped]
    catalogs = [core_catalog(), *(shipped[name] for name in chosen)]
    if module_path is not None:
        catalogs.append(catalog_of(load_module(module_path)))
    try:
        return EventCatalog.merge(*catalogs)
    except CatalogError as exc:
        raise LedgerError(f"{module_path}: {exc.detail}", reason="catalog-invalid") from None


@contextlib.contextmanager
def run_catalog(
    module_path: Path | None, run_dir: Path | None, *, runtimes: Iterable[str] | None = None
) -> Iterator[tuple[EventCatalog, str | None]]:
    """``reader_catalog``, and, for a run directory read without ``--catalog``, the run's own
    events decoded by the module it kept, in that module's sandbox (``controller.program.kept``);
    with ``"kept module"`` when it took part. A kept module that does not load leaves its events
    undecoded, said once on stderr."""
    base = reader_catalog(module_path, runtimes=runtimes)
    module = None
    if module_path is None and run_dir is not None:
        from controller.program.kept import kept_module

        module = kept_module(run_dir)
    if module is None:
        yield base, None
        return
    from controller.errors import SocietyError
    from controller.program.kept import kept_catalog

    with contextlib.ExitStack() as stack:
        try:
            kept = stack.enter_context(kept_catalog(run_dir, module))  # type: ignore[arg-type]
            merged = EventCatalog.merge(base, kept)
        except (SocietyError, CatalogError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(
                f"society ledger: the run's own events stay undecoded: its kept module "
                f"{module.name} did not load ({terminal_safe(first)[:300]}); pass --catalog "
                "MODULE.py to decode them",
                file=sys.stderr,
            )
            yield base, None
            return
        yield merged, "kept module"
