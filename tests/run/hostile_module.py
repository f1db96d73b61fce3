"""A hostile RunSpec module: it hunts for the ledger's signing key and asks for forged signatures.

It runs where every module runs, in the controller's process. ``HOSTILE_NEEDLE`` (``mask:masked``,
hex) lets it recognise the operator key's 32 raw bytes without the test holding them: the needle
is rebuilt in place only while the memory is searched. What it finds goes into the ledger.
"""

from __future__ import annotations

import ctypes
import gc
import mmap
import os
from pathlib import Path
from typing import Any, ClassVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from controller import Event, EventCatalog, RunContext, RunSpec, ScriptedPolicy, scripted
from ledger.signing import encode_public_key


class KeyHunt(Event):
    """What the module found of the key, and what the signer it reached signed for it."""

    tag: ClassVar[str] = "hostile.key-hunt/v1"

    key_objects: list[str]
    environment_hits: int
    own_memory_hits: int
    children_memory_hits: int
    signer_found: bool
    signer_reads: dict[str, str]
    forged: dict[str, str]


def _key_objects(public_key: str) -> list[str]:
    """The objects in this process that hold this run's private key (other runs' are no find)."""
    found = set()
    for thing in gc.get_objects():
        if issubclass(type(thing), Ed25519PrivateKey):  # type(): a dead weak proxy raises
            held = encode_public_key(thing.public_key())
        elif type(thing).__name__ == "SigningKey":
            held = getattr(thing, "public_key", None)
        else:
            continue
        if held == public_key:
            found.add(type(thing).__name__)
    return sorted(found)


def _environment_hits() -> int:
    hits = sum("PRIVATE KEY" in value for value in os.environ.values())
    return hits + Path("/proc/self/environ").read_bytes().count(b"PRIVATE KEY")


def _needle() -> bytearray:
    mask_hex, masked_hex = os.environ["HOSTILE_NEEDLE"].split(":")
    mask, masked = bytes.fromhex(mask_hex), bytes.fromhex(masked_hex)
    needle = bytearray(len(mask))
    for i in range(len(mask)):  # filled in place: no other copy of the key's bytes is made
        needle[i] = mask[i] ^ masked[i]
    return needle


def _memory_hits(pid: int | str, needle: bytearray, skip: int = -1) -> int:
    """Occurrences of ``needle`` in ``pid``'s readable memory, except at address ``skip``."""
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        span, perms, *rest = line.split()
        start, end = (int(x, 16) for x in span.split("-"))
        if perms.startswith("r") and not (rest[-1:] and rest[-1].startswith("[v")):
            regions.append((start, end))
    hits = 0
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for start, end in regions:
            # an anonymous map outside every region listed, unmapped after: it leaves no copy
            with mmap.mmap(-1, end - start) as window:
                try:
                    memory.seek(start)
                    got = memory.readinto(window)  # type: ignore[attr-defined]
                except OSError:
                    continue
                at = window.find(needle, 0, got or 0)
                while at >= 0:
                    hits += start + at != skip
                    at = window.find(needle, at + 1, got or 0)
    return hits


def _children() -> list[tuple[int, bytes]]:
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next(line for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent.split()[1]) == me:
            found.append((int(entry.name), cmdline))
    return found


def _read(path: str) -> str:
    try:
        Path(path).read_bytes()[:16]
    except PermissionError:
        return "refused"
    except OSError as exc:
        return f"error: {exc.strerror}"
    return "read"


def _forge(run_id: str, public_key: str) -> dict[str, str]:
    """Ask whatever signs this run's ledger for signatures over statements it never made."""
    head = "0" * 64
    other = "sr-" + "f" * 32
    statements = {
        "other-run": f'{{"headDigest":"{head}","recordCount":5,"runId":"{other}"}}',
        "other-completion": (
            f'{{"headDigest":"{head}","ledgerFormatVersion":1,"manifestSha256":"{head}",'
            f'"recordCount":9,"recordsSha256":"{head}","runId":"{other}"}}'
        ),
        "not-a-statement": f'{{"event":{{"tag":"society.router-message-committed/v1"}},'
        f'"producer":"router","runId":"{run_id}"}}',
    }
    signers = [
        o
        for o in gc.get_objects()
        if type(o).__name__ in ("SignerProcess", "SigningKey")
        and getattr(o, "public_key", None) == public_key  # this run's, not a stale one's
    ]
    outcome = {}
    for name, text in statements.items():
        outcome[name] = "no signer reached"
        for signer in signers:
            try:
                signer.sign(text.encode())
            except Exception as refused:
                outcome[name] = f"refused: {getattr(refused, 'reason', type(refused).__name__)}"
            else:
                outcome[name] = "signed"
                break
    return outcome


async def hunt(ctx: RunContext) -> None:
    needle = _needle()
    address = ctypes.addressof(ctypes.c_char.from_buffer(needle))  # the one expected occurrence
    children = _children()
    signer = [pid for pid, cmdline in children if b"signer_process" in cmdline]
    readable = [pid for pid, _ in children if pid not in signer]
    child_hits = 0
    for pid in readable:
        try:
            child_hits += _memory_hits(pid, needle)
        except OSError:
            pass  # a sandboxed agent's memory is another uid's
    reads: dict[str, Any] = {}
    for pid in signer:
        for part in ("environ", "mem", "maps"):
            reads[part] = _read(f"/proc/{pid}/{part}")
    await ctx.events.emit(
        KeyHunt(
            key_objects=_key_objects(ctx.ledger.receipt().public_key),
            environment_hits=_environment_hits(),
            own_memory_hits=_memory_hits("self", needle, skip=address),
            children_memory_hits=child_hits,
            signer_found=bool(signer),
            signer_reads=reads,
            forged=_forge(ctx.ledger.run_id, ctx.ledger.receipt().public_key),
        )
    )


run_spec = RunSpec.define(
    id="hostile.key-hunt/v1",
    events=[EventCatalog.make(KeyHunt)],
    agents={"alice": scripted(ScriptedPolicy())},
    execute=hunt,
)
