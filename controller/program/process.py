"""The researcher's module in a process of its own: ``async with isolated_module(path) as spec``.

The controller never imports the module. A sandboxed child (``controller.program.host``) does,
and sends its ``run_spec`` across as data; the controller rebuilds a ``RunSpec`` from it with
``RunSpec.define`` (so every check runs again on its side) whose ``execute`` runs the program in
the child, serving ``ctx`` through ``ProgramServer``. How the child starts and what it sees
(no run directory, no ledger, no key file): ``child``. Unsandboxed (``SOCIETY_UNSANDBOXED=1``,
``society run --unsandboxed``) it is a plain process of the same user: the ledger writer and the
signer are still out of its reach, the operator's key file is not (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict

from controller.agents.runtime import RuntimeDescriptor
from controller.agents.shipped import shipped_runtime_catalogs
from controller.errors import SocietyError
from controller.network.limits import MessageLimits
from controller.program.child import Folders, Sandbox, module_folders, spawn_plain
from controller.program.codec import MAX_UNSENT_CHARS, CodecError, Decoder, encode
from controller.program.serve import ProgramServer, not_running
from controller.program.wire import MAX_HELD_BYTES, Channel, Frame, error_frame, settle
from controller.run.context import RunContext
from controller.run.outcomes import Unsent
from controller.run.spec import RunSpec, RunSpecError
from ledger.events import Event, EventCatalog, validate_tag

SPEC_TIMEOUT_S = 300.0
"""How long the module may take to import and define its ``run_spec``."""
PARAMETERS_TIMEOUT_S = 60.0
SEND_TIMEOUT_S = 10.0
"""A module process that reads nothing of what the controller sends for this long is lost."""
STOP_GRACE_S = 5.0
PROGRAM_CANCEL_GRACE_S = 30.0
"""How long a cancelled program may take to end (its cleanup still served) before the run goes
on without it."""


class RemoteParameters(BaseModel):
    """The run's parameters as the module process validated them (its model stays there)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ProgramRaised(SocietyError):
    """The program raised in the module process; ``error_type`` names its exception's class."""

    reason = "program-raised"
    error_type = "ProgramRaised"


def _program_error(error: Mapping[str, Any]) -> Exception:
    type_name = str(error.get("type") or "Exception")
    cls: type[ProgramRaised] = type(
        type_name.rsplit(".", 1)[-1], (ProgramRaised,), {"__qualname__": type_name}
    )
    reason = error.get("reason") if isinstance(error.get("reason"), str) else None
    next_step = error.get("next_step") if isinstance(error.get("next_step"), str) else None
    message = str(error.get("message") or "")
    return cls(message, reason=reason or "program-raised", next_step=next_step)


class ModuleProcess:
    """One module's child process and its channel; ``spec`` is what it defined."""

    def __init__(
        self, process: subprocess.Popen[bytes], channel: Channel, sandbox: Sandbox | None
    ) -> None:
        self._process = process
        self._channel = channel
        self._sandbox = sandbox
        self._serve: Callable[[Frame], None] | None = None
        self.spec: IsolatedRunSpec | None = None

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    async def start(
        cls, module_path: Path, *, sandboxed: bool, folders: Folders | None = None
    ) -> ModuleProcess:
        """Start the child on this thread (it dies with it) and wait for its ``run_spec``;
        ``RunSpecError`` for a module that does not define one. Sandboxed, the child sees
        ``folders`` (by default ``module_folders(module_path)``)."""
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sandbox: Sandbox | None = None
        try:
            if sandboxed:
                sandbox = Sandbox.claim()
                process = sandbox.spawn(module_path, there, folders or module_folders(module_path))
            else:
                process = spawn_plain(module_path, there)
        except BaseException:
            here.close()
            if sandbox is not None:
                sandbox.release()
            raise
        finally:
            there.close()
        channel = Channel(
            here,
            peer="module process",
            send_timeout_s=SEND_TIMEOUT_S,
            held_bytes_max=MAX_HELD_BYTES,
        )
        loaded = cls(process, channel, sandbox)
        try:
            await loaded._receive_spec(module_path)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await loaded.aclose()
            raise
        return loaded

    async def _receive_spec(self, module_path: Path) -> None:
        loop = asyncio.get_running_loop()
        described: asyncio.Future[Frame] = loop.create_future()

        def on_request(frame: Frame) -> None:
            op = frame.get("op")
            serve = self._serve
            if op in ("spec", "spec-error"):
                loop.call_soon_threadsafe(settle, described, frame)
            elif serve is not None:
                serve(frame)
            elif type(frame.get("id")) is int:
                self._channel.reply(frame["id"], error=error_frame(not_running()))

        def on_end() -> None:
            loop.call_soon_threadsafe(settle, described, {"op": "lost"})

        self._channel.start(on_request, on_end)
        with anyio.move_on_after(SPEC_TIMEOUT_S) as waiting:
            frame = await described
        if waiting.cancelled_caught:
            raise RunSpecError(
                f"importing {module_path} took over {SPEC_TIMEOUT_S:g} s",
                reason="module-import-failed",
            )
        if frame.get("op") == "spec-error":
            error = frame.get("error") if isinstance(frame.get("error"), dict) else {}
            assert isinstance(error, dict)
            next_step = error.get("next_step")
            raise RunSpecError(
                str(error.get("message") or "the module process failed"),
                reason=str(error.get("reason") or "module-import-failed"),
                next_step=next_step if isinstance(next_step, str) else None,
            )
        if frame.get("op") != "spec":
            code = self._process.poll()
            raise RunSpecError(
                f"the process importing {module_path} ended before it defined a run_spec "
                f"(exit status {code}); its output above says why",
                reason="module-import-failed",
            )
        self.spec = _rebuild(frame.get("spec"), self)

    async def execute(self, context: RunContext) -> Any:
        """Run the program in the child, serving ``context`` to it; its result, or
        ``ProgramRaised`` (named like its exception), or ``ChannelClosed`` when it died.

        Cancelled, it asks the program to stop and serves it ``PROGRAM_CANCEL_GRACE_S`` more
        (its ``finally`` blocks may still use ``ctx``), then lets the cancellation through: a
        program that blocks its loop or ignores cancellation does not hold the run."""
        assert self.spec is not None
        server = ProgramServer(self._channel, self.spec.events)
        answer: asyncio.Future[Frame | BaseException] | None = None
        try:
            async with server.serving() as on_request:
                self._serve = on_request
                sent = encode(_context_data(context), server.export)
                call_id, answer = self._channel.submit({"op": "execute", "context": sent})
                try:
                    outcome = await asyncio.shield(answer)
                except anyio.get_cancelled_exc_class():
                    self._channel.cancel(call_id)
                    raise
        except anyio.get_cancelled_exc_class():
            if answer is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(PROGRAM_CANCEL_GRACE_S):
                    async with server.serving() as on_request:
                        self._serve = on_request
                        await answer
            raise
        finally:
            self._serve = None
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome.get("op") == "error":
            error = outcome.get("error")
            raise _program_error(error if isinstance(error, dict) else {})
        unsent = outcome.get("unsent")
        if unsent is not None:
            return Unsent(str(unsent)[:MAX_UNSENT_CHARS])
        decoder = Decoder(event=self.spec.events.decode)
        try:
            return decoder.decode(outcome.get("value"))
        except CodecError as exc:
            return Unsent(f"a value the controller could not rebuild ({exc})")

    def check_event(self, wire: Mapping[str, Any], *, strict: bool) -> str | None:
        """The module's own class's verdict on a recorded event (blocking): ``None`` when it
        matches, else why not. For readers of a finished run's ledger (``kept_catalog``)."""
        answer = self._channel.request_sync(
            {"op": "check-event", "event": dict(wire), "strict": strict},
            timeout_s=PARAMETERS_TIMEOUT_S,
        )
        if answer.get("op") == "error":
            error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
            assert isinstance(error, dict)
            return str(error.get("message") or "the module's class refused it")[:2000]
        return None

    def parameters(self, values: Mapping[str, Any]) -> dict[str, Any] | None:
        """The module's own check of ``values`` (blocking): its model's dump, or ``None``."""
        answer = self._channel.request_sync(
            {"op": "parameters", "values": dict(values)}, timeout_s=PARAMETERS_TIMEOUT_S
        )
        if answer.get("op") == "error":
            error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
            assert isinstance(error, dict)
            next_step = error.get("next_step")
            raise RunSpecError(
                str(error.get("message") or "parameters refused"),
                reason=str(error.get("reason") or "parameters-invalid"),
                next_step=next_step if isinstance(next_step, str) else None,
            )
        value = answer.get("value")
        return dict(value) if isinstance(value, dict) else None

    async def aclose(self) -> None:
        """End the child (idempotent): close its channel, give it a moment, then kill it."""
        self._channel.close()
        process = self._process
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(process.wait, STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                await anyio.to_thread.run_sync(process.wait)
        if self._sandbox is not None:
            self._sandbox.release()
            self._sandbox = None


class IsolatedRunSpec(RunSpec):
    """A ``RunSpec`` rebuilt from what the module process sent; its program runs there."""

    process: ModuleProcess
    has_parameters: bool

    def parameters_from(self, values: Mapping[str, Any]) -> BaseModel | None:
        if not self.has_parameters:
            return super().parameters_from(values)
        dumped = self.process.parameters(values)
        return None if dumped is None else RemoteParameters.model_validate(dumped)


@contextlib.asynccontextmanager
async def isolated_module(
    module_path: Path, *, sandboxed: bool | None = None, folders: Folders | None = None
) -> AsyncIterator[IsolatedRunSpec]:
    """The module's ``run_spec``, defined in a child process that lives for the block; sandboxed
    unless ``sandboxed`` is false or, by default, ``SOCIETY_UNSANDBOXED`` is set."""
    if sandboxed is None:
        from controller.platforms.local.sandbox import unsandboxed_requested

        sandboxed = not unsandboxed_requested()
    process = await ModuleProcess.start(module_path, sandboxed=sandboxed, folders=folders)
    try:
        assert process.spec is not None
        yield process.spec
    finally:
        await process.aclose()


# ---- rebuilding the spec ---------------------------------------------------------------------


class _ModuleEvent(Event):
    """A customer event class of the module, as the controller holds it: its tag, any fields
    (the module's own class checked them; the record names the module as its producer)."""

    model_config = ConfigDict(extra="allow", frozen=True)


def _customer_catalog(tags: object) -> EventCatalog:
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise RunSpecError("the module's event tags are not a list of str", reason="bad-spec")
    classes = []
    for tag in tags:
        validate_tag(tag, "of the module")
        name = "ModuleEvent_" + "".join(c if c.isalnum() else "_" for c in tag)
        classes.append(type(name, (_ModuleEvent,), {"tag": tag, "__module__": __name__}))
    return EventCatalog.make(*classes)


def runtime_catalog(tags: list[str]) -> EventCatalog:
    known = EventCatalog.merge(*shipped_runtime_catalogs().values())
    unknown = [tag for tag in tags if tag not in known]
    if unknown:
        raise CodecError(f"runtime events {unknown} are not a shipped runtime's")
    return EventCatalog.make(*(known.class_for(tag) for tag in tags))


def _rebuild(sent: object, process: ModuleProcess) -> IsolatedRunSpec:
    if not isinstance(sent, dict):
        raise RunSpecError("the module process sent no spec", reason="bad-spec")
    decoder = Decoder(catalog=runtime_catalog)
    try:
        agents = decoder.decode(sent.get("agents"))
        limits = decoder.decode(sent.get("message_limits"))
    except CodecError as exc:
        raise RunSpecError(
            f"the module's run_spec does not rebuild here: {exc.detail}", reason="bad-spec"
        ) from None
    if not isinstance(agents, dict) or not all(
        isinstance(d, RuntimeDescriptor) for d in agents.values()
    ):
        raise RunSpecError("the module's agents are not runtime descriptors", reason="bad-roster")
    if not isinstance(limits, MessageLimits):
        raise RunSpecError("the module's message limits are not MessageLimits", reason="bad-spec")
    spec = IsolatedRunSpec.define(
        id=sent.get("id"),  # type: ignore[arg-type]
        agents=agents,
        execute=process.execute,
        events=[_customer_catalog(sent.get("events"))],
        message_limits=limits,
    )
    assert isinstance(spec, IsolatedRunSpec)
    object.__setattr__(spec, "process", process)
    object.__setattr__(spec, "has_parameters", sent.get("parameters") is True)
    object.__setattr__(spec, "defined_in", None)
    return spec


def _context_data(context: RunContext) -> dict[str, Any]:
    parameters = context.parameters
    return {
        "agents": MappingProxyType(dict(context.agents.items())),
        "network": context.network,
        "events": context.events,
        "ledger": context.ledger,
        "parameters": None if parameters is None else parameters.model_dump(mode="json"),
        "fork": context.fork,
    }
