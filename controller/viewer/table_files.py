"""``society ledger export DIR --format parquet|csv``: a run's or a suite's tables as files.

OUT_DIR/
  messages.<ext>, deliveries.<ext>, link_events.<ext>, model_usage.<ext>, runs.<ext>
  events/<tag>.<ext>   one per own event tag, the tag's ``/`` written ``.`` (as in schemas/events/)
  tables.json          what was written: the source, the format, each file's row count

Columns of a fixed kind keep their type when a table is empty. A flattened column (an own
event's fields, the grader's output, the run's parameters) takes the type its values share, else
holds each value as JSON text. CSV has no lists: a list cell is JSON text there. ``pyarrow`` is
the optional ``analysis`` extra and is imported only here, when a table is written.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from controller.errors import SetupError
from controller.suites.layout import write_atomically
from controller.viewer.tables import Tables, read_tables

TableFormat = Literal["parquet", "csv"]
FORMATS: tuple[TableFormat, ...] = ("parquet", "csv")
INDEX = "tables.json"
EVENTS_FOLDER = "events"
DEFAULT_ROOT = Path("tables")
"""Where the tables go without ``-o``: ``tables/<run id or suite id>/`` under the working
directory (never inside the run or suite folder, which is evidence)."""
_OWN_FILE = re.compile(r"(?:events/)?[a-z0-9][a-z0-9._-]*\.(?:parquet|csv)")


def export_tables(
    source: Path, output: Path | None, *, table_format: TableFormat
) -> dict[str, Any]:
    """Verify every ledger of ``source`` (a run, ledger or suite directory), then write its tables
    to ``output`` (default ``tables/<id>/``); returns what was written, as ``tables.json`` holds
    it. Raises ``LedgerError`` before anything is written when a ledger does not verify."""
    arrow = _pyarrow()
    tables = read_tables(source)
    if output is None:
        output = DEFAULT_ROOT / _name_of(tables, source)
    _clear_earlier_export(output)
    written: dict[str, int] = {}
    for name, rows in tables.rows.items():
        path = f"{name}.{table_format}"
        _write(arrow, _table(arrow, rows, tables.columns(name)), output / path, table_format)
        written[path] = len(rows)
    for tag, rows in sorted(tables.events.items()):
        path = f"{EVENTS_FOLDER}/{tag.replace('/', '.')}.{table_format}"
        _write(arrow, _table(arrow, rows, tables.columns(tag)), output / path, table_format)
        written[path] = len(rows)
    index: dict[str, Any] = {
        "written": str(output),
        "source": str(source),
        "format": table_format,
        "runs": len(tables.rows["runs"]),
        **({} if tables.suite is None else tables.suite),
        "tables": written,
    }
    write_atomically(output / INDEX, json.dumps(index, indent=2) + "\n")
    return index


def _pyarrow() -> Any:
    """The ``pyarrow`` module, with its ``csv`` and ``parquet`` modules loaded."""
    try:
        for name in ("pyarrow", "pyarrow.csv", "pyarrow.parquet"):
            importlib.import_module(name)
    except ImportError:
        raise SetupError(
            "writing tables needs pyarrow, which is not installed for this interpreter",
            reason="analysis-unavailable",
            next_step="pip install -e '.[analysis]' (pyarrow and pandas)",
        ) from None
    return importlib.import_module("pyarrow")


def _name_of(tables: Tables, source: Path) -> str:
    if tables.suite is not None and isinstance(tables.suite.get("suite"), str):
        name = tables.suite["suite"]
    elif len(tables.rows["runs"]) == 1:
        name = tables.rows["runs"][0]["run_id"]
    else:
        name = source.resolve().name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _clear_earlier_export(output: Path) -> None:
    """Make ``output`` ready: absent or empty, or an earlier table export, whose files (the ones
    its ``tables.json`` lists) are removed; anything else is refused, nothing is overwritten."""
    if output.exists() and not output.is_dir():
        raise SetupError(
            f"{output} is a file, not a folder for tables",
            reason="export-target-invalid",
            next_step="pass -o OUT_DIR naming a new or empty folder",
        )
    if not output.is_dir() or not any(output.iterdir()):
        return
    try:
        earlier = json.loads((output / INDEX).read_bytes())["tables"]
        listed = [name for name in earlier if isinstance(name, str) and _OWN_FILE.fullmatch(name)]
    except (OSError, ValueError, KeyError, TypeError):
        raise SetupError(
            f"{output} is not empty and holds no earlier table export ({INDEX})",
            reason="export-target-not-empty",
            next_step="pass -o OUT_DIR naming a new or empty folder",
        ) from None
    for name in listed:
        (output / name).unlink(missing_ok=True)
    (output / INDEX).unlink()


def _table(pa: Any, rows: list[dict[str, Any]], fixed: tuple[tuple[str, str], ...]) -> Any:
    names = [name for name, _ in fixed]
    extra = list(dict.fromkeys(key for row in rows for key in row if key not in set(names)))
    arrays = [_column(pa, [row.get(name) for row in rows], _type(pa, kind)) for name, kind in fixed]
    arrays += [_column(pa, [row.get(name) for row in rows], None) for name in extra]
    return pa.Table.from_arrays(arrays, names=[*names, *extra])


def _type(pa: Any, kind: str) -> Any:
    return {
        "string": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "time": pa.timestamp("us", tz="UTC"),
        "strings": pa.list_(pa.string()),
    }[kind]


def _column(pa: Any, values: list[Any], kind: Any) -> Any:
    """The values as one Arrow column of ``kind`` (inferred when ``None``); values that share no
    type (a field that is a number in one run and text in another) become JSON text."""
    try:
        return pa.array(values, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return pa.array([None if v is None else _json(v) for v in values], type=pa.string())


def _write(pa: Any, table: Any, path: Path, table_format: TableFormat) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    if table_format == "parquet":
        pa.parquet.write_table(table, temporary)
    else:
        pa.csv.write_csv(_flat_cells(pa, table), temporary)
    os.replace(temporary, path)


def _flat_cells(pa: Any, table: Any) -> Any:
    """CSV holds no lists or records: such a cell is written as JSON text."""
    columns = []
    for column in table.columns:
        if pa.types.is_nested(column.type):
            texts = [None if v is None else _json(v) for v in column.to_pylist()]
            columns.append(pa.array(texts, type=pa.string()))
        elif pa.types.is_null(column.type):
            columns.append(pa.array(column.to_pylist(), type=pa.string()))
        else:
            columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
