"""A hostile RunSpec module, run by ``society run``: it hunts for the operator's key and the ledger.

``KEY_PATH`` is replaced by the test with the operator key file's path (an attacker who knows
where the key lives). At import and in ``execute`` the module tries, and reports in one
``hostile.program-hunt/v1`` event, what it reached:

- the key file by its path, and the variable that names it;
- any ledger writer, router, signer or key object in its own process (a walk of every object);
- the writer behind ``ctx.events`` and ``ctx.ledger``;
- calls the controller does not export, sent on its own channel by hand;
- a core event (``RouterMessageCommitted``) through ``ctx.events.emit``;
- a file planted beside itself, and the run's artifact root (``ARTIFACTS``, replaced too).
"""

from __future__ import annotations

import gc
import os
from typing import Any, ClassVar

from controller import Event, EventCatalog, RunContext, RunSpec, ScriptedPolicy, scripted
from controller.events.network import RouterMessageCommitted

KEY_PATH = "@KEY_PATH@"
ARTIFACTS = "@ARTIFACTS@"
WANTED = ("LedgerWriter", "Router", "SignerProcess", "SignerSocket", "SigningKey", "Fabric")


class ProgramHunt(Event):
    tag: ClassVar[str] = "hostile.program-hunt/v1"

    key_at_import: str
    key_in_program: str
    key_variable: str | None
    objects: list[str]
    private: list[str]
    calls: dict[str, str]
    core_emit: str
    own_folder_write: str
    run_directory: str


def _read_key() -> str:
    try:
        with open(KEY_PATH, "rb") as key:
            return f"read {len(key.read())} bytes"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


KEY_AT_IMPORT = _read_key()


def _try(action: Any) -> str:
    try:
        action()
    except OSError as exc:
        return f"refused: {type(exc).__name__}"
    return "done"


def _objects() -> list[str]:
    found = set()
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name in WANTED:
            found.add(name)
    return sorted(found)


def _private(ctx: RunContext) -> list[str]:
    reached = []
    for holder in (ctx.events, ctx.ledger, ctx.network):
        for name in ("_writer", "_router", "_ledger"):
            try:
                object.__getattribute__(holder, name)
            except AttributeError:
                continue
            reached.append(f"{type(holder).__name__}.{name}")
    return reached


async def _calls(ctx: RunContext) -> dict[str, str]:
    """Calls on the controller's handles that ``exports`` does not list, sent as frames."""
    link: Any = object.__getattribute__(ctx.events, "_society_link")
    events: int = object.__getattribute__(ctx.events, "_society_handle")
    ledger: int = object.__getattribute__(ctx.ledger, "_society_handle")
    attempts = {
        "events._writer": (events, "_writer"),
        "events.__class__": (events, "__class__"),
        "ledger._writer": (ledger, "_writer"),
        "ledger.append": (ledger, "append"),
        "handle 999999": (999999, "emit"),
    }
    outcomes = {}
    for label, (target, name) in attempts.items():
        try:
            await link.call(target, name, (), {})
        except Exception as exc:
            outcomes[label] = f"refused: {getattr(exc, 'reason', type(exc).__name__)}"
        else:
            outcomes[label] = "answered"
    return outcomes


async def hunt(ctx: RunContext) -> None:
    forged = RouterMessageCommitted(
        conversation_id="c-1", message_id="m-1", sender_id="a-1", router_sequence=1, parts=["x"]
    )
    try:
        await ctx.events.emit(forged)
        core_emit = "appended"
    except Exception as exc:
        core_emit = f"refused: {getattr(exc, 'reason', type(exc).__name__)}"
    await ctx.events.emit(
        ProgramHunt(
            key_at_import=KEY_AT_IMPORT,
            key_in_program=_read_key(),
            key_variable=os.environ.get("SOCIETY_SIGNING_KEY"),
            objects=_objects(),
            private=_private(ctx),
            calls=await _calls(ctx),
            core_emit=core_emit,
            own_folder_write=_try(lambda: open(__file__ + ".planted", "w").close()),
            run_directory=_try(lambda: os.listdir(ARTIFACTS)),
        )
    )


run_spec = RunSpec.define(
    id="hostile.program/v1",
    events=[EventCatalog.make(ProgramHunt)],
    agents={"quiet": scripted(ScriptedPolicy())},
    execute=hunt,
)
