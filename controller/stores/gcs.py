"""A run directory exported to, and read back from, ``gs://<bucket>/<run id>/``.

The GKE profile writes the ledger to controller-local scratch, then exports the run directory.
The order is the contract: every other object first, then the ledger's ``completion.json``, so a
reader that sees ``completion.json`` sees a whole export. A run without a completed receipt exports
its signed prefix (records up to the last checkpoint) and, last, ``export-incomplete.json``. An
export with neither final object is unfinished, and readers refuse it.

Each object is created with ``if_generation_match=0`` (never overwritten), so a retried export
skips what an earlier attempt finished (same bytes) and refuses what differs. GCS makes an object
visible only once its upload finishes: a failed upload leaves no partial object.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import controller.settings as settings
from controller.errors import SocietyError
from ledger import LedgerError
from ledger.format import COMPLETION, RECORDS
from ledger.run_artifacts import locate_ledger

SCHEME = "gs://"
INCOMPLETE_MARKER = "export-incomplete.json"
EXPORT_ENV = settings.LEDGER_EXPORT.name
TOKEN_FILE_ENV = settings.GCS_TOKEN_FILE.name
"""A file holding an OAuth 2.0 access token for GCS (the export Job's downscoped token)."""
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
DEFAULT_DEADLINE_S = 120.0


class LedgerExportError(SocietyError):
    """An export did not finish; ``reason`` is machine-readable, the message says what to do."""

    reason = "export-failed"


@dataclass(frozen=True, slots=True)
class ExportReceipt:
    """A finished export: where, how many objects, and whether the ledger was complete."""

    url: str
    objects: int
    skipped: int
    complete: bool
    signed_records: int
    ledger: str | None = None
    """The ledger's directory relative to the run directory (``ledger/main``; "" when the run
    directory is the ledger)."""

    def ledger_url(self) -> str | None:
        return None if self.ledger is None else self.url + self.ledger


def split_url(url: str) -> tuple[str, str]:
    """``gs://bucket/prefix`` as ``(bucket, "prefix/")``; raises ``LedgerExportError``."""
    if not url.startswith(SCHEME) or not url[len(SCHEME) :].split("/", 1)[0]:
        raise LedgerExportError(
            f"{url!r} is not a gs://BUCKET[/PREFIX] URL", reason="export-url-invalid"
        )
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def storage_client(project: str | None = None) -> Any:
    """A ``google.cloud.storage.Client``: anonymous against ``STORAGE_EMULATOR_HOST`` when that
    is set; else the access token in ``SOCIETY_GCS_TOKEN_FILE`` when that is set (the export
    Job's downscoped token); else Application Default Credentials (Workload Identity on GKE)."""

    try:
        from google.cloud import storage  # type: ignore[import-untyped]
    except ImportError:
        raise LedgerError(
            "reading or writing gs:// needs the google-cloud-storage client: "
            "pip install 'society-runner[gke]'",
            reason="gcs-client-missing",
        ) from None

    if settings.current().get(EMULATOR_ENV):
        from google.auth.credentials import AnonymousCredentials

        anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
        return storage.Client(project=project or "emulator", credentials=anonymous)
    if token_file := settings.current().get(TOKEN_FILE_ENV):
        from google.oauth2.credentials import Credentials

        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise LedgerError(
                f"cannot read the GCS access token at {token_file} ({exc.strerror}); unset "
                f"{TOKEN_FILE_ENV} to use Application Default Credentials",
                reason="gcs-token-unreadable",
            ) from None
        bearer = Credentials(token=token)  # type: ignore[no-untyped-call]
        return storage.Client(project=project or "_", credentials=bearer)
    return storage.Client(project=project)


def export_boundary(bucket: str, prefix: str) -> Any:
    """The Credential Access Boundary of one run's export: create and read objects under
    ``gs://bucket/prefix`` only (no list, no delete, no other prefix or bucket)."""
    from google.auth import downscoped

    if not prefix.endswith("/") or prefix == "/":
        raise ValueError(f'an export prefix must be a run\'s directory ("<run id>/"): {prefix!r}')
    objects = f"projects/_/buckets/{bucket}/objects/{prefix}"
    condition = downscoped.AvailabilityCondition(  # type: ignore[no-untyped-call]
        expression=f"resource.name.startsWith('{objects}')",
        title="one run's export",
        description=f"objects under gs://{bucket}/{prefix} only",
    )
    rule = downscoped.AccessBoundaryRule(  # type: ignore[no-untyped-call]
        available_resource=f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        available_permissions=[
            "inRole:roles/storage.objectCreator",
            "inRole:roles/storage.objectViewer",
        ],
        availability_condition=condition,
    )
    return downscoped.CredentialAccessBoundary(rules=[rule])  # type: ignore[no-untyped-call]


def downscoped_token(bucket: str, prefix: str) -> str:
    """An access token (at most an hour) that may only export one run: this process's
    Application Default Credentials (the worker's Workload Identity) narrowed by
    ``export_boundary`` through Google's Security Token Service. GKE only: STS cannot run here."""
    import google.auth
    from google.auth import downscoped
    from google.auth.transport.requests import Request

    source, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    narrowed = downscoped.Credentials(  # type: ignore[no-untyped-call]
        source_credentials=source, credential_access_boundary=export_boundary(bucket, prefix)
    )
    narrowed.refresh(Request())
    return str(narrowed.token)


def _plan(run_dir: Path) -> tuple[list[tuple[str, bytes | Path]], bool, int, str | None]:
    """``(objects in upload order, complete, signed records, the ledger's relative path)``."""
    from ledger.verification import verify_ledger

    ledger_dir, located_run = locate_ledger(run_dir)
    root = located_run or ledger_dir
    verified = verify_ledger(None, ledger_dir, require_catalog=False, allow_incomplete=True)
    complete = (ledger_dir / COMPLETION).exists()
    records_path = ledger_dir / RECORDS
    ledger = ledger_dir.relative_to(root).as_posix() if ledger_dir != root else ""
    objects: list[tuple[str, bytes | Path]] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path == ledger_dir / COMPLETION:
            continue
        name = path.relative_to(root).as_posix()
        if path == records_path and not complete:
            # The signed prefix: records up to and including the last checkpoint's line (which
            # signs the records before it); what follows it carries no signature.
            lines = records_path.read_bytes().splitlines(keepends=True)
            keep = 0 if verified.last_checkpoint is None else verified.last_checkpoint + 1
            objects.append((name, b"".join(lines[:keep])))
        else:
            objects.append((name, path))
    if complete:
        objects.append(
            ((ledger_dir / COMPLETION).relative_to(root).as_posix(), ledger_dir / COMPLETION)
        )
    else:
        marker = {
            "complete": False,
            "signedRecords": verified.signed_records,
            "reason": "the run left no completion.json; this is its signed prefix",
        }
        objects.append((INCOMPLETE_MARKER, json.dumps(marker, sort_keys=True).encode()))
    return objects, complete, verified.signed_records, ledger


def export_run(
    run_dir: Path,
    url: str,
    *,
    client: Any | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
    progress: Callable[[str], None] | None = None,
) -> ExportReceipt:
    """Export ``run_dir`` to ``url`` (``gs://bucket/<prefix>/``), the final object last.

    Transient failures are retried by the client until ``deadline_s``; anything left failing
    raises ``LedgerExportError`` naming what was not exported. Never returns on a partial export.
    """
    from google.api_core import exceptions
    from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

    bucket_name, prefix = split_url(url)
    try:
        objects, complete, signed, ledger = _plan(run_dir)
    except LedgerError as exc:
        raise LedgerExportError(
            f"{run_dir} holds no ledger that verifies ({exc}); nothing was exported",
            reason="export-ledger-invalid",
        ) from exc
    bucket = (client or storage_client()).bucket(bucket_name)
    retry = DEFAULT_RETRY.with_deadline(deadline_s)
    uploaded = skipped = 0
    for index, (name, source) in enumerate(objects):
        data = source.read_bytes() if isinstance(source, Path) else source
        blob = bucket.blob(prefix + name)
        try:
            blob.upload_from_string(
                data, if_generation_match=0, retry=retry, timeout=min(60.0, deadline_s),
                checksum="crc32c",
            )  # fmt: skip
            uploaded += 1
        except exceptions.PreconditionFailed:
            if _same(bucket, prefix + name, data, retry):
                skipped += 1  # an earlier attempt exported it
            else:
                raise LedgerExportError(
                    f"gs://{bucket_name}/{prefix}{name} already exists with other content; an "
                    f"export of another run used this prefix, choose another",
                    reason="export-conflict",
                ) from None
        except Exception as exc:  # the client's transport and API errors, after its retries
            left = len(objects) - index
            base = url.rstrip("/")  # the CLI adds the run directory's name to the bucket's URL
            if base.endswith("/" + run_dir.name):
                base = base[: -len(run_dir.name) - 1]
            raise LedgerExportError(
                f"exporting {run_dir} to {url} failed at {name} ({type(exc).__name__}: {exc}); "
                f"{left} of {len(objects)} objects are not exported and the export is unfinished "
                f"(readers refuse it). Run `society ledger export {run_dir} {base}` again to "
                f"resume",
                reason="export-failed",
            ) from exc
        if progress is not None:
            progress(f"exported {prefix}{name}")
    url = f"gs://{bucket_name}/{prefix}"
    return ExportReceipt(url, uploaded, skipped, complete, signed, ledger)


def _same(bucket: Any, name: str, data: bytes, retry: Any) -> bool:
    blob = bucket.get_blob(name, retry=retry)
    if blob is None or blob.size != len(data):
        return False
    return bool(blob.md5_hash == base64.b64encode(hashlib.md5(data).digest()).decode())


@contextmanager
def downloaded(url: str, *, client: Any | None = None) -> Iterator[Path]:
    """An exported run directory copied to a temporary directory, for the ledger readers.

    Raises ``LedgerError`` (``export-unfinished``) when the export has no final object.
    """
    bucket_name, prefix = split_url(url)
    bucket = (client or storage_client()).bucket(bucket_name)
    blobs = list(bucket.list_blobs(prefix=prefix))
    names = {blob.name[len(prefix) :] for blob in blobs}
    if not blobs:
        raise LedgerError(f"nothing is exported at {url}", reason="export-missing")
    finished = INCOMPLETE_MARKER in names or any(
        n == COMPLETION or n.endswith("/" + COMPLETION) for n in names
    )
    if not finished:
        raise LedgerError(
            f"the export at {url} is unfinished (no {COMPLETION} and no {INCOMPLETE_MARKER}): "
            "it failed or is still running; export the run again",
            reason="export-unfinished",
        )
    with tempfile.TemporaryDirectory(prefix="society-gcs-ledger-") as tmp:
        root = Path(tmp)
        for blob in blobs:
            relative = Path(blob.name[len(prefix) :])
            if relative.is_absolute() or ".." in relative.parts:
                raise LedgerError(f"object {blob.name} escapes its prefix", reason="export-invalid")
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target))
        (root / INCOMPLETE_MARKER).unlink(missing_ok=True)
        yield root


def is_gcs(location: str | Path) -> bool:
    return str(location).startswith(SCHEME)


def export_if_configured(
    run_dir: Path, run_id: str, *, progress: Callable[[str], None] | None = None
) -> ExportReceipt | None:
    """The worker's export step: ``run_dir`` to ``$SOCIETY_LEDGER_EXPORT/<run id>/`` when that
    is set and the run left a ledger; ``None`` otherwise. Safe to repeat (it resumes)."""

    destination = settings.current().get(EXPORT_ENV)
    if not destination or not (run_dir / "ledger").is_dir():
        return None
    return export_run(run_dir, destination.rstrip("/") + "/" + run_id, progress=progress)
