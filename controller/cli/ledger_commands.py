"""``society ledger verify|show|schema|follow`` and ``society grade``: the evidence, offline."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from pydantic_core import from_json

from controller.cli import compare_command, inspect_command
from controller.cli.ledger_catalogs import ledger_runtimes, reader_catalog, run_catalog
from controller.settings import current
from controller.stores.gcs import DEFAULT_DEADLINE_S
from controller.viewer.message_lines import (
    conversation_lines,
    message_counts_line,
    message_json_lines,
)
from controller.viewer.selection import LedgerFilter, Selection
from ledger import EventCatalog, LedgerError, LedgerVerificationError
from ledger.event_schemas import check_event_schemas, export_event_schemas
from ledger.format import MANIFEST, RECORDS
from ledger.grading import catalog_of, grade_ledger, grader_definition_id, load_module
from ledger.receipts import read_receipt
from ledger.run_artifacts import ArtifactCheck, check_run_artifacts, locate_ledger
from ledger.signing import load_trusted_key
from ledger.tail import follow_ledger, wait_for_ledger
from ledger.terminal import escape_json_text, terminal_json, terminal_safe
from ledger.timeline import (
    TimelineStyle,
    artifact_lines,
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
    inspect_command.add_export_inspect(commands)

    verify = commands.add_parser(
        "verify",
        help="check a ledger offline; print one JSON line",
        description=(
            "Check schemas, catalog, digests, hash chain, sequence, counts and signature. DIR is a "
            "ledger directory or a run directory: then every harvested file and log is re-hashed "
            "against the ledger too. Prints "
            'one JSON line; exit 0 when {"valid": true}, 1 otherwise.'
        ),
    )
    verify.add_argument(
        "directory", type=_location, metavar="DIR", help=LEDGER_OR_RUN + ", or gs://BUCKET/RUN_ID"
    )
    _catalog_option(verify)
    _trusted_key_option(verify)
    verify.add_argument("--definition", metavar="ID", help="the definition id the ledger must hold")
    verify.add_argument(
        "--receipt",
        metavar="RESULT",
        help="the run's result line (its text, or a file such as RUN_DIR/result.json): the "
        "ledger's run id, record count, head digest and public key must match it",
    )
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
        help="print a ledger as a readable timeline, or its messages in full",
        description=(
            "One line per record: time offset, sequence, producer, tag and fields; with "
            "--messages, every message in full, per conversation, with what became of it on the "
            "way to each receiver. DIR is a ledger directory or a run directory: then its "
            "harvested files are re-hashed against the ledger too. --agent, --conversation and "
            "--tag narrow both views (each may repeat; several kinds must all match). Exit 0 when "
            "it verifies (a live ledger's prefix included), 1 otherwise, 2 when a filter names "
            "nothing the ledger holds."
        ),
    )
    show.add_argument("directory", type=Path, metavar="DIR", help=LEDGER_OR_RUN)
    show.add_argument(
        "--messages",
        action="store_true",
        help="every message's full text per conversation: sender, time, who received it, and "
        "what its links dropped (and why), delayed or held",
    )
    show.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME",
        help="only records and messages an agent (or endpoint: NAME, agent:NAME, "
        "endpoint:NAME) sent or received, or that name it; repeatable",
    )
    show.add_argument(
        "--conversation",
        action="append",
        default=[],
        metavar="ID",
        help="only records and messages of this conversation (c-1); repeatable",
    )
    show.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="TAG",
        help="only records of this event tag (society.link-message-dropped/v1, "
        "link-message-dropped, or a glob: 'link-*'); with --messages, messages with such a "
        "record; repeatable",
    )
    show.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line on stdout (each record, or with --messages each message "
        "and its fates); the verification line goes to stderr",
    )
    _catalog_option(show)
    _trusted_key_option(show)
    _color_option(show)
    show.set_defaults(handler=show_command, error_exit=EXIT_BAD_FILTER)

    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of a module's event catalog; gate its event shapes",
        description=(
            "MODULE.py defines `catalog` (an EventCatalog) or `run_spec`. With --write, freeze "
            "each of its own event tags' schema as DIR/<tag>.schema.json (a breaking change under "
            "a tag is refused); with --check, exit 1 when one is missing, differs, or is broken by "
            "its class (a removed or retyped field, a new required one: give it a new tag)."
        ),
    )
    schema.add_argument("module", type=Path, metavar="MODULE.py")
    gate = schema.add_mutually_exclusive_group()
    gate.add_argument("--check", action="store_true", help="compare with DIR; change nothing")
    gate.add_argument("--write", action="store_true", help="write the missing or changed files")
    schema.add_argument(
        "--dir",
        type=Path,
        default=Path("schemas") / "events",
        metavar="DIR",
        help="where the committed event schemas live (default: schemas/events)",
    )
    schema.set_defaults(handler=schema_command)

    schemas = commands.add_parser(
        "schemas",
        help="export the JSON Schemas of the ledger files, result line and wire protocol",
        description=(
            "Write schemas/<name>.schema.json from the code (and freeze each new format version "
            "under schemas/frozen/); with --check, change nothing and exit 1 on any difference or "
            "breaking change without a version move."
        ),
    )
    schemas.add_argument("--out", type=Path, metavar="DIR", help="folder (default: schemas/)")
    schemas.add_argument("--check", action="store_true", help="compare only")
    schemas.set_defaults(handler=schemas_command)

    follow = commands.add_parser(
        "follow",
        help="print a live ledger's durable records as they commit, until it completes",
        description=(
            "Tail a ledger another process is writing (DIR may be its run directory, and may not "
            "exist yet); stops when completion.json appears and then verifies the whole ledger."
        ),
    )
    follow.add_argument("directory", type=Path, metavar="DIR", help=LEDGER_OR_RUN)
    follow.add_argument("--json", action="store_true", help="print each record as a JSON line")
    follow.add_argument(
        "--poll", type=float, default=0.1, metavar="SECONDS", help="poll interval (0.1)"
    )
    follow.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for a ledger that does not exist yet (60; 0: do not wait)",
    )
    _catalog_option(follow)
    _color_option(follow)
    follow.set_defaults(handler=follow_command)

    grade = subparsers.add_parser(
        "grade",
        help="verify a ledger, then grade it with a grader module; print its JSON result",
        description=(
            "GRADER.py defines `catalog` (or `run_spec`) and `def grade(ledger) -> dict`. The "
            "ledger is opened and verified with that catalog first (and, for a run directory, "
            "every harvested file re-hashed against it)."
        ),
    )
    grade.add_argument("grader", type=Path, metavar="GRADER.py")
    grade.add_argument(
        "directory", type=_location, metavar="DIR", help=LEDGER_OR_RUN + ", or gs://BUCKET/RUN_ID"
    )
    _trusted_key_option(grade)
    grade.add_argument(
        "--receipt",
        metavar="RESULT",
        help="the run's result line (text or file): grade only the ledger it names",
    )
    grade.set_defaults(handler=grade_command)

    export = commands.add_parser(
        "export",
        help="upload a run directory to gs://BUCKET/<run id>/, or write its tables (--format)",
        description=(
            "With gs://BUCKET[/PREFIX]: uploads DIR (a run directory: the ledger and the "
            "harvested artifacts; or a ledger directory alone) to gs://BUCKET/<run id>/ with the "
            "ledger's completion.json last. A ledger without completion.json exports its signed "
            "prefix (records up to the last checkpoint) and export-incomplete.json last. Running "
            "it again resumes an export that failed. Credentials: Application Default "
            "Credentials (Workload Identity on GKE); STORAGE_EMULATOR_HOST for an emulator. "
            "With --format parquet|csv instead: verifies every ledger of DIR (a run, ledger or "
            "suite directory), then writes one table per kind to OUT_DIR: messages, deliveries, "
            "link_events, model_usage, runs, and events/<tag> per own event tag (docs/analysis.md)"
            "; needs the analysis extra (pip install -e '.[analysis]'). Give exactly one of "
            "gs://BUCKET and --format."
        ),
    )
    export.add_argument(
        "directory", type=Path, metavar="DIR", help=LEDGER_OR_RUN + "; with --format, or a suite"
    )
    export.add_argument(
        "bucket", nargs="?", metavar="gs://BUCKET[/PREFIX]", help="upload DIR to this bucket"
    )
    export.add_argument(
        "--format",
        choices=("parquet", "csv"),
        dest="table_format",
        help="write DIR's tables in this format instead of uploading it",
    )
    export.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="OUT_DIR",
        help="with --format: the folder for the tables (default tables/<run id or suite id>/)",
    )
    export.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_S,
        metavar="SECONDS",
        help=f"how long to retry an upload that keeps failing ({DEFAULT_DEADLINE_S:g})",
    )
    export.set_defaults(handler=export_command)


LEDGER_OR_RUN = "a run directory (artifacts/sr-...) or a ledger directory"
EXIT_BAD_FILTER = 2
"""``ledger show``: an --agent, --conversation or --tag names nothing the ledger holds."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


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


def _location(text: str) -> str | Path:
    """A gs:// URL stays text (``Path`` would fold its ``//``); anything else is a path."""
    from controller.stores.gcs import is_gcs

    return text if is_gcs(text) else Path(text)


def _local(handler: Any) -> Any:
    """Run ``handler(args)`` with ``args.directory`` downloaded first when it is a gs:// URL."""

    def run(args: argparse.Namespace) -> int:
        if not isinstance(args.directory, str):
            return int(handler(args))
        from controller.stores.gcs import downloaded

        try:
            with downloaded(args.directory) as local:
                return int(handler(argparse.Namespace(**{**vars(args), "directory": local})))
        except LedgerError as exc:
            return _print_invalid(exc)

    return run


def export_command(args: argparse.Namespace) -> int:
    from controller.errors import SetupError
    from controller.stores.gcs import LedgerExportError, export_run

    if (args.bucket is None) == (args.table_format is None):
        given = "both" if args.bucket is not None else "neither"
        raise SetupError(
            f"give gs://BUCKET[/PREFIX] (upload DIR) or --format parquet|csv (write its tables): "
            f"exactly one of them, not {given}",
            reason="export-target-unclear",
            next_step="society ledger export DIR gs://BUCKET, or society ledger export DIR "
            "--format parquet -o OUT_DIR",
        )
    if args.output is not None and args.table_format is None:
        raise SetupError(
            "-o OUT_DIR is where --format writes tables; an upload goes to gs://BUCKET",
            reason="export-target-unclear",
            next_step="leave out -o, or give --format parquet|csv instead of gs://BUCKET",
        )
    if args.table_format is not None:
        return _export_tables(args)
    try:
        url = args.bucket.rstrip("/") + "/" + _run_id_of(args.directory)
        receipt = export_run(args.directory, url, deadline_s=args.deadline)
    except (LedgerExportError, LedgerError) as exc:
        print(f"society ledger export: error ({exc.reason}): {exc}", file=sys.stderr)
        return 1
    _print_json(
        {"exported": receipt.url, "objects": receipt.objects, "alreadyThere": receipt.skipped,
         "complete": receipt.complete, "signedRecords": receipt.signed_records}
    )  # fmt: skip
    return 0


def _export_tables(args: argparse.Namespace) -> int:
    """``export DIR --format``: verify every ledger of DIR, then write its tables."""
    from controller.errors import SetupError
    from controller.viewer.table_files import export_tables

    try:
        written = export_tables(args.directory, args.output, table_format=args.table_format)
    except (SetupError, LedgerError) as exc:
        print(f"society ledger export: error ({exc.reason}): {exc}", file=sys.stderr)
        return 1
    _print_json(written)
    return 0


def _run_id_of(directory: Path) -> str:
    """The run id an export is named by: a run directory's name, a ledger directory's run id
    (from its manifest; the folder's name where it names none, and the export then refuses it)."""
    ledger_dir, run_dir = locate_ledger(directory)
    if run_dir is not None:
        return run_dir.name
    try:
        run_id = (_json_object((ledger_dir / MANIFEST).read_bytes()) or {}).get("runId")
    except OSError:
        run_id = None
    return run_id if isinstance(run_id, str) and _PLAIN_NAME.fullmatch(run_id) else directory.name


@_local
def verify_command(args: argparse.Namespace) -> int:
    try:
        ledger_dir, run_dir = locate_ledger(args.directory)
    except LedgerError as exc:
        return _print_invalid(exc)
    runtimes = (ledger_runtimes(ledger_dir) or []) if args.strict_catalog else None
    try:
        with run_catalog(args.catalog, run_dir, runtimes=runtimes) as (catalog, decoder):
            return _verify(args, ledger_dir, run_dir, catalog, decoder)
    except LedgerError as exc:
        return _print_invalid(exc)


def _verify(
    args: argparse.Namespace,
    ledger_dir: Path,
    run_dir: Path | None,
    catalog: EventCatalog,
    decoder: str | None,
) -> int:
    try:
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        receipt = read_receipt(args.receipt) if args.receipt else None
        verified = verify_ledger(
            catalog,
            ledger_dir,
            expected_definition_id=args.definition,
            trusted_key=trusted,
            strict_catalog=args.strict_catalog,
            require_catalog=args.catalog is not None,
            allow_incomplete=args.allow_incomplete,
            receipt=receipt,
        )
    except LedgerError as exc:
        return _print_invalid(exc)
    summary = verification_summary(verified, decoded_all=args.catalog is not None)
    if decoder is not None:
        summary["decodedBy"] = decoder
    if receipt is not None:
        summary["receipt"] = "matched"
    if run_dir is None:
        _print_json(summary)
        return 0
    check = check_run_artifacts(run_dir, verified.envelopes)
    _print_json(run_summary(summary, check))
    return 0 if check.valid else 1


def run_summary(summary: dict[str, Any], check: ArtifactCheck) -> dict[str, Any]:
    """The verify line of a run directory: the ledger's fields, then its artifacts' check."""
    result = dict(summary)
    if not check.valid:
        first = check.problems[0]
        result = {**summary, "valid": False, "reason": first.reason, "detail": first.detail}
    result["artifacts"] = check.summary()
    if check.problems:
        result["artifactProblems"] = [problem.to_wire() for problem in check.problems]
    return result


def verification_summary(verified: Verification, *, decoded_all: bool) -> dict[str, Any]:
    """The JSON line of a ledger that verified (docs/ledger.md names every field)."""
    summary: dict[str, Any] = {
        "valid": True,
        "records": len(verified.envelopes),
        "runId": verified.manifest.run_id,
        "definitionId": verified.manifest.definition_id,
        "signature": verified.signature,
        "signedRecords": verified.signed_records,
        "unsignedRecords": verified.unsigned_records,
        "signedBy": verified.signed_by,
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
        ledger_dir, run_dir = locate_ledger(args.directory)
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        with run_catalog(args.catalog, run_dir) as (catalog, _):
            try:
                verified = verify_ledger(
                    catalog,
                    ledger_dir,
                    trusted_key=trusted,
                    require_catalog=False,
                    allow_incomplete=True,
                )
            except LedgerVerificationError as exc:
                return _show_unverified(ledger_dir, exc, style, args)
    except LedgerError as exc:
        return _print_invalid(exc)
    rows = [envelope.to_wire() for envelope in verified.envelopes]
    manifest = verified.manifest.to_wire()
    selection = _selection(args, rows, manifest)
    check = None if run_dir is None else check_run_artifacts(run_dir, verified.envelopes)
    if args.json:
        summary = verification_summary(verified, decoded_all=args.catalog is not None)
        _print_json(summary if check is None else run_summary(summary, check), stream=sys.stderr)
    else:
        _print_lines(header_lines(manifest, records=len(rows), style=style, verification=verified))
        if check is not None:
            _print_lines(artifact_lines(check, style))
        print()
    _show_selection(selection, rows, args, style)
    return 0 if check is None or check.valid else 1


def _show_unverified(
    directory: Path,
    failure: LedgerVerificationError,
    style: TimelineStyle,
    args: argparse.Namespace,
) -> int:
    """Show what is there anyway, under a banner saying it does not verify."""
    manifest: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    try:
        manifest = _json_object((directory / MANIFEST).read_bytes()) or {}
        lines = (directory / RECORDS).read_bytes().splitlines()
    except OSError:
        lines = []
    for line in lines:
        row = _json_object(line)
        if row is not None:
            rows.append(row)
    selection = _selection(args, rows, manifest)
    if args.json:
        failed = {"valid": False, "reason": failure.reason, "detail": failure.detail}
        _print_json(failed, stream=sys.stderr)
    else:
        failure_text = (failure.reason, failure.detail)
        _print_lines(header_lines(manifest, records=len(rows), style=style, failure=failure_text))
        if rows:
            print()
    if rows:
        _show_selection(selection, rows, args, style)
    return 1


def _selection(
    args: argparse.Namespace, rows: list[dict[str, Any]], manifest: dict[str, Any]
) -> Selection:
    """The records and messages the filters keep (``SelectionError`` when one names nothing)."""
    declared = manifest.get("catalogTags")
    wanted = LedgerFilter(tuple(args.agent), tuple(args.conversation), tuple(args.tag))
    return wanted.apply(rows, declared_tags=declared if isinstance(declared, list) else ())


def _show_selection(
    selection: Selection, rows: list[dict[str, Any]], args: argparse.Namespace, style: TimelineStyle
) -> None:
    """The timeline or the messages, as text or JSON lines, with a count line below the text."""
    if args.messages and args.json:
        _print_lines(message_json_lines(selection.conversations))
    elif args.messages:
        _print_lines(conversation_lines(selection.conversations, style))
        print(message_counts_line(selection.conversations))
    elif args.json:
        _print_lines(terminal_json(row) for row in selection.records)
    else:
        _print_lines(record_lines(selection.records, style))
        print()
        counts = selection.tag_counts()
        shown = len(selection.records)
        if shown != len(rows):
            print(f"shown: {shown:,} of {len(rows):,} records")
        print(terminal_safe(tag_counts_line(counts)))


def _json_object(data: bytes) -> dict[str, Any] | None:
    """A JSON object from bytes that did not verify, or None; the parser bounds nesting depth."""
    try:
        value = from_json(data, allow_inf_nan=False)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def schema_command(args: argparse.Namespace) -> int:
    try:
        catalog = catalog_of(load_module(args.module))
    except LedgerError as exc:
        return _print_invalid(exc)
    if not (args.check or args.write):
        print(json.dumps(catalog.json_schema(), indent=2, ensure_ascii=False))
        return 0
    kernel = set(reader_catalog(None).tags)
    own = EventCatalog.make(*(cls for tag, cls in catalog.items() if tag not in kernel))
    if args.check:
        problems = check_event_schemas([own], args.dir)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    written, refused = export_event_schemas([own], args.dir)
    for path in written:
        print(path)
    for refusal in refused:
        print(f"not written: {refusal}", file=sys.stderr)
    return 1 if refused else 0


def schemas_command(args: argparse.Namespace) -> int:
    from controller.cli.schema_export import (
        SCHEMAS_DIR,
        check_format_doc,
        check_schemas,
        export_event_files,
        export_format_doc,
        export_schemas,
    )

    directory = args.out or SCHEMAS_DIR
    if args.check:
        problems = check_schemas(directory) + (check_format_doc() if args.out is None else [])
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    written, refused = export_event_files(directory)
    document = export_format_doc() if args.out is None else None
    for path in [*export_schemas(directory), *written, *([document] if document else [])]:
        print(path)
    for refusal in refused:
        print(f"not written: {refusal}", file=sys.stderr)
    return 1 if refused else 0


def follow_command(args: argparse.Namespace) -> int:
    style = _style(args.color)
    sequence_width = 5
    try:
        catalog = reader_catalog(args.catalog)
        ledger_dir = wait_for_ledger(args.directory, timeout=args.timeout, poll=args.poll)
        for envelope in follow_ledger(ledger_dir, poll_interval=args.poll):
            if args.json:
                print(escape_json_text(envelope.canonical().decode("utf-8")), flush=True)
            else:
                row = envelope.to_wire()
                print(record_line(row, style, sequence_width=sequence_width), flush=True)
        verified = verify_ledger(catalog, ledger_dir, require_catalog=False)
        _, run_dir = locate_ledger(args.directory)
    except LedgerError as exc:
        return _print_invalid(exc)
    except KeyboardInterrupt:
        return 130
    summary = verification_summary(verified, decoded_all=False)
    if run_dir is None:
        _print_json(summary, stream=sys.stderr)
        return 0
    check = check_run_artifacts(run_dir, verified.envelopes)
    _print_json(run_summary(summary, check), stream=sys.stderr)
    return 0 if check.valid else 1


@_local
def grade_command(args: argparse.Namespace) -> int:
    try:
        grader = load_module(args.grader)
        trusted = load_trusted_key(args.trusted_key) if args.trusted_key else None
        if grader_definition_id(grader) is None:
            print(
                f"note: {args.grader} names no `run_spec` and no `definition_id`, so the ledger's "
                f"definition id is not checked; import the RunSpec the grader was written for as "
                f'`run_spec`, or set `definition_id = "..."`',
                file=sys.stderr,
            )
        receipt = read_receipt(args.receipt) if args.receipt else None
        result = grade_ledger(
            grader,
            args.directory,
            base_catalog=reader_catalog(None),
            trusted_key=trusted,
            receipt=receipt,
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
    check = getattr(exc, "check", None)
    if isinstance(check, ArtifactCheck):
        failure["artifacts"] = check.summary()
        failure["artifactProblems"] = [problem.to_wire() for problem in check.problems]
    _print_json(failure)
    return 1


def _print_json(value: Any, *, stream: Any = None) -> None:
    print(terminal_json(value), file=stream or sys.stdout, flush=True)


def _print_lines(lines: Any) -> None:
    for line in lines:
        print(line)


def _style(color: str) -> TimelineStyle:
    tty = sys.stdout.isatty()
    use_color = color == "always" or (
        color == "auto" and tty and "NO_COLOR" not in current().environ
    )
    width = shutil.get_terminal_size().columns if tty else None
    return TimelineStyle(color=use_color, width=width)
