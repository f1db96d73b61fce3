"""Offline grading: load a grader module, open and verify a ledger with its catalog, call ``grade``.

A grader (or catalog) module is a Python file defining either ``catalog`` (an ``EventCatalog``) or
``run_spec`` (whose ``.catalog`` is one); a grader also defines ``def grade(ledger) -> dict``,
which receives the verified ``LedgerArtifacts``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.artifacts import LedgerArtifacts, open_ledger_artifacts
from ledger.errors import LedgerError
from ledger.events import EventCatalog
from ledger.receipts import ReceiptClaim
from ledger.run_artifacts import locate_ledger, require_run_artifacts


def load_module(path: Path | str) -> ModuleType:
    """Import the Python file at ``path`` as a fresh module (its folder importable meanwhile)."""
    source = Path(path).resolve()
    if not source.is_file():
        raise LedgerError(f"{path} is not a file; pass a Python module", reason="module-unloadable")
    name = f"_society_module_{hashlib.sha256(str(source).encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise LedgerError(f"{path} is not a Python module", reason="module-unloadable")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic and dataclasses look their module up while defining
    folder = str(source.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise LedgerError(
            f"importing {path} failed: {type(exc).__name__}: {exc} "
            f"({Path(where.filename).name}:{where.lineno}); fix the module and run again",
            reason="module-unloadable",
        ) from exc
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def catalog_of(module: ModuleType) -> EventCatalog:
    """The module's ``catalog``, or its ``run_spec.catalog``."""
    candidate = getattr(module, "catalog", None)
    if candidate is None and hasattr(module, "run_spec"):
        candidate = getattr(module.run_spec, "catalog", None)
    if not isinstance(candidate, EventCatalog):
        raise LedgerError(
            f"{module.__file__} defines neither a module-level `catalog` (an EventCatalog) nor a "
            f"`run_spec` with a `.catalog`; add `catalog = EventCatalog.make(...)`",
            reason="catalog-not-found",
        )
    return candidate


def grader_definition_id(grader: ModuleType) -> str | None:
    """The definition id the grader names: its module-level ``definition_id``, or the id of its
    ``run_spec``; None when it names neither (the ledger's definition id then goes unchecked)."""
    named = getattr(grader, "definition_id", None)
    ident = getattr(getattr(grader, "run_spec", None), "id", None)
    if named is None:
        return ident if isinstance(ident, str) else None
    if not isinstance(named, str) or (isinstance(ident, str) and ident != named):
        raise LedgerError(
            f"{grader.__file__} names definition_id {str(named)[:80]!r}, which is not a string or "
            f"not its run_spec's id {ident!r}; name the definition the grader was written for once",
            reason="grader-invalid",
        )
    return named


def grade_ledger(
    grader: ModuleType,
    ledger_dir: Path | str,
    *,
    base_catalog: EventCatalog | None = None,
    trusted_key: str | Path | None = None,
    receipt: ReceiptClaim | None = None,
) -> dict[str, Any]:
    """Verify ``ledger_dir`` with the grader's catalog (merged with ``base_catalog``), then grade.

    ``ledger_dir`` may be a run directory: its harvested artifacts are then re-hashed against the
    ledger first (``RunArtifactsError`` on any missing, changed or extra one). When the grader
    names a definition (``grader_definition_id``), the ledger must hold it
    (``definition-mismatch``); with ``receipt``, it must be the ledger that receipt names.
    Verification failures raise ``LedgerVerificationError``; a grader without ``grade``, or one
    that returns something other than a JSON object, raises ``LedgerError("grader-invalid")``.
    """
    grade = getattr(grader, "grade", None)
    if not callable(grade):
        raise LedgerError(
            f"{grader.__file__} defines no `def grade(ledger) -> dict`", reason="grader-invalid"
        )
    catalogs = [base_catalog] if base_catalog is not None else []
    catalog = EventCatalog.merge(*catalogs, catalog_of(grader))
    directory, run_dir = locate_ledger(ledger_dir)
    artifacts: LedgerArtifacts = open_ledger_artifacts(
        catalog,
        directory,
        expected_definition_id=grader_definition_id(grader),
        trusted_key=trusted_key,
        receipt=receipt,
    )
    if run_dir is not None:
        require_run_artifacts(run_dir, tuple(record.envelope for record in artifacts.records))
    result = grade(artifacts)
    if not isinstance(result, Mapping):
        raise LedgerError(
            f"grade() returned {type(result).__name__}; it must return a dict (a JSON object)",
            reason="grader-invalid",
        )
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise LedgerError(
            f"grade() returned a dict that is not JSON: {exc}", reason="grader-invalid"
        ) from exc
    return dict(result)
