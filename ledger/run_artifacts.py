"""Whole-run verification: re-hash every artifact a run's ledger recorded by digest.

The ledger layer knows no event class of the kernel. It reads the claim generically: any record
whose event carries an ``artifact`` (a path relative to the run directory) and a ``sha256`` (with
an optional ``size``) says "this file, with these bytes, was harvested". Both profiles harvest
into ``RUN_DIR/artifacts/``, so a file there that no record claims is an extra artifact.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ledger.errors import LedgerError
from ledger.format import COMPLETION, MANIFEST, RECORDS, RecordEnvelope

RUN_LEDGERS = "ledger"
"""Ledgers of a run live in ``RUN_DIR/ledger/<ledger ref>/``."""
DEFAULT_LEDGER_REF = "main"
ARTIFACTS = "artifacts"
"""Harvested files live in ``RUN_DIR/artifacts/``; every file there must be claimed."""

ArtifactReason = Literal[
    "artifact-missing", "artifact-changed", "artifact-extra", "artifact-path-invalid"
]
RUN_ENTRIES = (RUN_LEDGERS, ARTIFACTS)
"""Either entry makes a directory a run directory."""
LEDGER_FILES = (MANIFEST, RECORDS, COMPLETION)
_CHUNK = 1024 * 1024
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class ArtifactProblem:
    reason: ArtifactReason
    path: str
    """Relative to the run directory, as the record names it (or as found on disk)."""
    record: int | None
    """The logicalSequence of the record that claims it (None for an extra file)."""
    detail: str

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"reason": self.reason, "path": self.path, "detail": self.detail}
        if self.record is not None:
            wire["record"] = self.record
        return wire


@dataclass(frozen=True, slots=True)
class ArtifactCheck:
    """The result of re-hashing a run's artifacts; ``problems`` empty means every one matched."""

    run_dir: Path
    checked: int
    """Artifacts the ledger claims (each re-hashed)."""
    problems: tuple[ArtifactProblem, ...]

    @property
    def valid(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        counts = {reason: 0 for reason in ("missing", "changed", "extra")}
        for problem in self.problems:
            key = problem.reason.removeprefix("artifact-")
            counts[key] = counts.get(key, 0) + 1
        return {"checked": self.checked, **counts}


class RunArtifactsError(LedgerError):
    """The ledger verified but the run's artifacts do not match it; ``problems`` lists each."""

    def __init__(self, check: ArtifactCheck) -> None:
        first = check.problems[0]
        more = len(check.problems) - 1
        suffix = f" (and {more} more artifact problem{'s' * (more != 1)})" if more else ""
        super().__init__(first.detail + suffix, reason=first.reason)
        self.check = check
        self.record = first.record


def require_run_artifacts(
    run_dir: Path | str, envelopes: tuple[RecordEnvelope, ...]
) -> ArtifactCheck:
    """``check_run_artifacts``, raising ``RunArtifactsError`` unless every artifact matched."""
    check = check_run_artifacts(run_dir, envelopes)
    if not check.valid:
        raise RunArtifactsError(check)
    return check


def locate_ledger(directory: Path | str) -> tuple[Path, Path | None]:
    """``(ledger_dir, run_dir)`` for a ledger directory (run_dir None) or a run directory.

    Every command that takes a ledger resolves its argument here. A directory that holds
    ``ledger/`` or ``artifacts/`` is a run directory, and its layout is checked strictly: its
    ledger is ``ledger/<ref>/`` (``main`` if present, else the only ref), never ledger files at its
    own top level (``run-layout-invalid``), so the artifact check cannot be skipped by copying
    them there. Anything else is taken as a ledger directory, whose reader says what is missing.
    """
    path = Path(directory)
    ledgers = path / RUN_LEDGERS
    if not any(os.path.lexists(path / name) for name in RUN_ENTRIES):
        return path, None
    stray = [name for name in LEDGER_FILES if os.path.lexists(path / name)]
    if stray:
        raise _layout(
            f"{path} is a run directory (it holds {RUN_LEDGERS}/ or {ARTIFACTS}/) with ledger "
            f"files at its top level ({', '.join(stray)}); a run keeps its ledger only under "
            f"{RUN_LEDGERS}/<ref>/: pass {ledgers}/<ref> to read a ledger alone, or remove them"
        )
    if ledgers.is_symlink() or not ledgers.is_dir():
        raise _layout(
            f"{path} holds {ARTIFACTS}/ but no {RUN_LEDGERS}/ folder (or a link in its place); a "
            f"run directory keeps its ledger under {RUN_LEDGERS}/<ref>/"
        )
    if (ledgers / DEFAULT_LEDGER_REF / MANIFEST).exists():
        return _ledger_of(path, DEFAULT_LEDGER_REF), path
    refs = ledger_refs(path)
    if len(refs) == 1:
        return _ledger_of(path, refs[0]), path
    if not refs:
        raise LedgerError(
            f"{path} is a run directory whose {RUN_LEDGERS}/ holds no ledger (no "
            f"{RUN_LEDGERS}/<ref>/{MANIFEST}): the run has not created it yet, or it was removed",
            reason="manifest-missing",
        )
    raise LedgerError(
        f"{path} is a run directory with {len(refs)} ledgers under {RUN_LEDGERS}/ "
        f"({', '.join(refs) or 'none'}); pass the ledger directory {ledgers}/<ref> itself",
        reason="run-ledger-ambiguous",
    )


def _ledger_of(run_dir: Path, ref: str) -> Path:
    ledger = run_dir / RUN_LEDGERS / ref
    if ledger.is_symlink():
        raise _layout(f"{ledger} is a symbolic link; a run's ledger is a folder of its own")
    return ledger


def _layout(detail: str) -> LedgerError:
    return LedgerError(detail, reason="run-layout-invalid")


def ledger_refs(run_dir: Path | str) -> list[str]:
    """The refs under a run directory's ``ledger/`` that hold a ledger (a manifest.json)."""
    ledgers = Path(run_dir) / RUN_LEDGERS
    if not ledgers.is_dir():
        return []
    return sorted(p.name for p in ledgers.iterdir() if (p / MANIFEST).exists())


def claimed_artifacts(envelopes: tuple[RecordEnvelope, ...]) -> list[tuple[int, str, str, Any]]:
    """``(record, artifact path, sha256, size)`` for each record whose event claims a file."""
    claims = []
    for envelope in envelopes:
        event = envelope.event
        path, digest = event.get("artifact"), event.get("sha256")
        if isinstance(path, str) and isinstance(digest, str):
            claims.append((envelope.logical_sequence, path, digest, event.get("size")))
    return claims


def check_run_artifacts(
    run_dir: Path | str, envelopes: tuple[RecordEnvelope, ...]
) -> ArtifactCheck:
    """Re-hash each claimed artifact under ``run_dir``; list missing, changed and extra files."""
    root = Path(run_dir)
    problems: list[ArtifactProblem] = []
    claimed: set[str] = set()
    claims = claimed_artifacts(envelopes)
    for record, path, digest, size in claims:
        relative = _safe_relative(path)
        if relative is None:
            problems.append(ArtifactProblem(
                "artifact-path-invalid", path, record,
                f"record {record} names artifact {path[:200]!r}, which is not a plain relative "
                f"path under {ARTIFACTS}/; the ledger claims a file outside the run's artifacts",
            ))  # fmt: skip
            continue
        claimed.add(relative)
        problem = _compare(root, relative, record, digest, size)
        if problem is not None:
            problems.append(problem)
    problems += _extras(root, claimed)
    return ArtifactCheck(run_dir=root, checked=len(claims), problems=tuple(problems))


def _safe_relative(path: str) -> str | None:
    pure = PurePosixPath(path)
    parts = pure.parts
    if (
        not path
        or "\\" in path
        or "\x00" in path
        or pure.is_absolute()
        or str(pure) != path
        or any(part in ("..", ".") for part in parts)
        or len(parts) < 2
        or parts[0] != ARTIFACTS
    ):
        return None
    return path


def _compare(
    root: Path, relative: str, record: int, digest: str, size: Any
) -> ArtifactProblem | None:
    def problem(reason: ArtifactReason, why: str) -> ArtifactProblem:
        return ArtifactProblem(reason, relative, record, f"{relative} (record {record}) {why}")

    actual = _hash(root, relative)
    if actual is None:
        return problem(
            "artifact-missing",
            "is not in the run directory (or is not a regular file): the harvested copy was "
            "deleted or moved; restore it from the run's original artifacts",
        )
    actual_digest, actual_size = actual
    if actual_digest != digest or (isinstance(size, int) and size != actual_size):
        return problem(
            "artifact-changed",
            f"hashes to {actual_digest[:16]}… ({actual_size} bytes); the ledger recorded "
            f"{digest[:16]}… ({size} bytes): the file was changed after harvest",
        )
    return None


def _hash(root: Path, relative: str) -> tuple[str, int] | None:
    """SHA-256 and size of a regular file reached without following any symbolic link."""
    current = root
    for part in PurePosixPath(relative).parts[:-1]:
        current = current / part
        if current.is_symlink() or not current.is_dir():
            return None
    try:
        fd = os.open(root / relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        digest = hashlib.sha256()
        size = 0
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _extras(root: Path, claimed: set[str]) -> list[ArtifactProblem]:
    """Every file (or link) under ``artifacts/`` that no record claims, walked iteratively through
    directory descriptors: no recursion limit and no path-length limit, however deep the tree."""
    found: list[ArtifactProblem] = []
    try:
        top = os.open(root / ARTIFACTS, _DIRECTORY)
    except OSError:
        return found  # no artifacts/ (or a link in its place): each claim is then missing
    frames: list[tuple[int, str, list[str]]] = [(top, ARTIFACTS, [])]
    try:
        _walk(frames, claimed, found)
    finally:
        for fd, _, _ in frames:
            os.close(fd)
    return sorted(found, key=lambda problem: problem.path)


def _walk(
    frames: list[tuple[int, str, list[str]]], claimed: set[str], found: list[ArtifactProblem]
) -> None:
    """Depth first; a folder's descriptor stays open only while subfolders of it wait."""
    fd, relative, _ = frames[-1]
    frames[-1] = (fd, relative, _list(fd, relative, claimed, found))
    while frames:
        fd, relative, pending = frames[-1]
        if not pending:
            frames.pop()
            os.close(fd)
            continue
        name = pending.pop()
        path = f"{relative}/{name}"
        try:
            child = os.open(name, _DIRECTORY, dir_fd=fd)
        except OSError as exc:
            found.append(_extra(path, f"cannot be walked ({exc.strerror or exc})"))
            continue
        if not pending:
            frames.pop()
            os.close(fd)
        frames.append((child, path, []))  # in place first: closed on any way out
        frames[-1] = (child, path, _list(child, path, claimed, found))


def _list(fd: int, relative: str, claimed: set[str], found: list[ArtifactProblem]) -> list[str]:
    """Record the unclaimed non-folders in one folder; return its subfolders (last first)."""
    folders: list[str] = []
    try:
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as exc:
        found.append(_extra(relative, f"cannot be listed ({exc.strerror or exc})"))
        return folders
    for entry in entries:
        path = f"{relative}/{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            folders.append(entry.name)
        elif path not in claimed:
            found.append(
                _extra(path, "was added after harvest; remove it or find who put it there")
            )
    return folders[::-1]


def _extra(relative: str, why: str) -> ArtifactProblem:
    return ArtifactProblem(
        "artifact-extra",
        relative,
        None,
        f"{relative} is in the run's {ARTIFACTS}/ but no record claims it: it {why}",
    )
