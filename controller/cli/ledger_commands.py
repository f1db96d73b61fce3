"""``society ledger verify|show|schema|follow`` and ``society grade``: the evidence, offline."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from controller.cli import compare_command
from ledger import EventCatalog, LedgerError, LedgerVerificationError, ledger_catalog
from ledger.format import MANIFEST, RECORDS
from ledger.grading import catalog_of, grade_ledger, load_module
from ledger.signing import load_trusted_key
from ledger.tail import follow_ledger
from ledger.timeline import (
    TimelineStyle,
    header_lines,
    record_line,
    record_lines,
    tag_counts_line,
)
from ledger.verification import Verification, verify_ledger


def add_commands(subparsers: Any) -> None:
    ledger = subparsers.add_parser(
        "ledger",
        help="verify, show, follow a ledger; export a catalog's schema",
        description="Work with the signed ledger a run leaves behind.",
    )
    commands = ledger.add_subparsers(dest="ledger_command", required=True, metavar="SUBCOMMAND")
    compare_command.add_compare(commands)

    verify = commands.add_parser(
        "verify",
        help="check a ledger offline; print one JSON line",
        description=(
            "Check schemas, catalog, digests, hash chain, sequence, counts and signature. Prints "
            'one JSON line; exit 0 when {"valid": true}, 1 otherwise.'
        ),
    )
    verify.add_argument("directory", type=Path, metavar="DIR")
    _catalog_option(verify)
    _trusted_key_option(verify)
    verify.add_argument("--definition", metavar="ID", help="the definition id the ledger must hold")
    verify.add_argument(
        "--strict-catalog",
        action="store_true",
        help="require the catalog to hold exactly the ledger's tags (default: at least them)",
    )
    verify.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="accept a ledger without completion.json: verify its prefix and say where it stops",
    )
    verify.set_defaults(handler=verify_command)

    show = commands.add_parser(
        "show",
        help="print a ledger as a readable timeline",
        description="One line per record: time offset, sequence, producer, tag and fields.",
    )
    show.add_argument("directory", type=Path, metavar="DIR")
    _catalog_option(show)
    _trusted_key_option(show)
    _color_option(show)
    show.set_defaults(handler=show_command)

    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of a module's event catalog",
        description="MODULE.py defines `catalog` (an EventCatalog) or `run_spec`.",
    )
    schema.add_argument("module", type=Path, metavar="MODULE.py")
    schema.set_defaults(handler=schema_command)

    follow = commands.add_parser(
        "follow",
        help="print a live ledger's durable records as they commit, until it completes",
        description=(
            "Tail a ledger another process is writing; stops when completion.json appears and "
            "then verifies the whole ledger."
        ),
    )
    follow.add_argument("directory", type=Path, metavar="DIR")
    follow.add_argument("--json", action="store_true", help="print each record as a JSON line")
    follow.add_argument(
        "--poll", type=float, default=0.1, metavar="SECONDS", help="poll interval (0.1)"
    )
    _color_option(follow)
    follow.set_defaults(handler=follow_command)

    grade = subparsers.add_parser(
        "grade",
        help="verify a ledger, then grade it with a grader module; print its JSON result",
        description=(
            "GRADER.py defines `catalog` (or `run_spec`) and `def grade(ledger) -> dict`. The "
            "ledger is opened and verified with that catalog first."
        ),
    )
    grade.add_argument("grader", type=Path, metavar="GRADER.py")
    grade.add_argument("directory", type=Path, metavar="LEDGER_DIR")
    _trusted_key_option(grade)
    grade.set_defaults(handler=grade_command)


def _catalog_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog",
        type=Path,
        metavar="MODULE.py",
        help="module defining `catalog` or `run_spec`; without it customer events stay undecoded",
    )


def _trusted_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trusted-key",
        type=Path,
        metavar="FILE",
        help="public key (ed25519:<base64> or PEM) the ledger must be signed by",
    )


def _color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")


def core_catalog() -> EventCatalog:
    """The kernel's events when ``controller.events`` is importable, else the ledger's own."""
    try:
        from controller.events import core_events
    except ImportError:
        return ledger_catalog
    return core_events


def reader_catalog(module_path: Path | None) -> EventCatalog:
    if module_path is None:
        return core_catalog()
    return EventCatalog.merge(core_catalog(), catalog_of(load_module(module_path)))


def verify_command(args: argparse.Namespace) -> int:
    try:
        catalog = reader_catalog(args.catalog)
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        verified = verify_ledger(
            catalog,
            args.directory,
            expected_definition_id=args.definition,
            trusted_key=trusted,
            strict_catalog=args.strict_catalog,
            require_catalog=args.catalog is not None,
            allow_incomplete=args.allow_incomplete,
        )
    except LedgerError as exc:
        return _print_invalid(exc)
    _print_json(verification_summary(verified, decoded_all=args.catalog is not None))
    return 0


def verification_summary(verified: Verification, *, decoded_all: bool) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "valid": True,
        "records": len(verified.envelopes),
        "runId": verified.manifest.run_id,
        "definitionId": verified.manifest.definition_id,
        "signature": verified.signature,
    }
    if not decoded_all:
        summary["notDecoded"] = dict(sorted(verified.undecoded.items()))
    if verified.stop is not None:
        summary["complete"] = False
        summary["stop"] = {
            "reason": verified.stop.reason,
            "records": verified.stop.record_count,
            "byteOffset": verified.stop.byte_offset,
            "detail": verified.stop.detail,
        }
        summary["lastCheckpoint"] = verified.last_checkpoint
    return summary


def show_command(args: argparse.Namespace) -> int:
    style = _style(args.color)
    try:
        catalog = reader_catalog(args.catalog)
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
    except LedgerError as exc:
        return _print_invalid(exc)
    try:
        verified = verify_ledger(
            catalog,
            args.directory,
            trusted_key=trusted,
            require_catalog=False,
            allow_incomplete=True,
        )
    except LedgerVerificationError as exc:
        return _show_unverified(args.directory, exc, style)
    rows = [envelope.to_wire() for envelope in verified.envelopes]
    manifest = verified.manifest.to_wire()
    _print_lines(header_lines(manifest, records=len(rows), style=style, verification=verified))
    print()
    _print_lines(record_lines(rows, style))
    print()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["event"]["tag"]] = counts.get(row["event"]["tag"], 0) + 1
    print(tag_counts_line(counts))
    return 0


def _show_unverified(
    directory: Path, failure: LedgerVerificationError, style: TimelineStyle
) -> int:
    """Show what is there anyway, under a banner saying it does not verify."""
    manifest: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    try:
        loaded = json.loads((directory / MANIFEST).read_bytes())
        manifest = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        pass
    try:
        for line in (directory / RECORDS).read_bytes().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    except OSError:
        pass
    failure_text = (failure.reason, failure.detail)
    _print_lines(header_lines(manifest, records=len(rows), style=style, failure=failure_text))
    if rows:
        print()
        _print_lines(record_lines(rows, style))
    return 1


def schema_command(args: argparse.Namespace) -> int:
    try:
        catalog = catalog_of(load_module(args.module))
    except LedgerError as exc:
        return _print_invalid(exc)
    print(json.dumps(catalog.json_schema(), indent=2, ensure_ascii=False))
    return 0


def follow_command(args: argparse.Namespace) -> int:
    style = _style(args.color)
    sequence_width = 5
    try:
        for envelope in follow_ledger(args.directory, poll_interval=args.poll):
            if args.json:
                print(envelope.canonical().decode("utf-8"), flush=True)
            else:
                row = envelope.to_wire()
                print(record_line(row, style, sequence_width=sequence_width), flush=True)
        verified = verify_ledger(core_catalog(), args.directory, require_catalog=False)
    except LedgerError as exc:
        return _print_invalid(exc)
    except KeyboardInterrupt:
        return 130
    _print_json(verification_summary(verified, decoded_all=False), stream=sys.stderr)
    return 0


def grade_command(args: argparse.Namespace) -> int:
    try:
        grader = load_module(args.grader)
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        result = grade_ledger(
            grader, args.directory, base_catalog=core_catalog(), trusted_key=trusted
        )
    except LedgerError as exc:
        return _print_invalid(exc)
    _print_json(result)
    return 0


def _print_invalid(exc: LedgerError) -> int:
    failure: dict[str, Any] = {"valid": False, "reason": exc.reason, "detail": exc.detail}
    record = getattr(exc, "record", None)
    if record is not None:
        failure["record"] = record
    _print_json(failure)
    return 1


def _print_json(value: Any, *, stream: Any = None) -> None:
    print(json.dumps(value, ensure_ascii=False), file=stream or sys.stdout, flush=True)


def _print_lines(lines: Any) -> None:
    for line in lines:
        print(line)


def _style(color: str) -> TimelineStyle:
    tty = sys.stdout.isatty()
    use_color = color == "always" or (color == "auto" and tty and "NO_COLOR" not in os.environ)
    width = shutil.get_terminal_size().columns if tty else None
    return TimelineStyle(color=use_color, width=width)
