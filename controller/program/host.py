"""The module process: imports the researcher's module, runs its program with ``ctx`` as proxies.

    python -m controller.program.host CHANNEL_FD MODULE.py

It runs in a sandbox of its own (``controller.program.process``) and holds one descriptor: its
end of the channel to the controller. It imports the module, sends the ``run_spec`` across as
data (``codec``), answers the controller's requests (``parameters``, ``policy``, ``execute``,
``cancel``) and ends when the channel closes. What ``execute(ctx)`` calls on ``ctx`` is
forwarded to the controller (``proxies``), which serves only what ``exports`` lists; the ledger
writer, the router, the signer and the operator's key are in processes this one cannot reach.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from controller.agents.roster import AgentHandle, Roster
from controller.errors import SocietyError
from controller.program.codec import MAX_UNSENT_CHARS, CodecError, encode
from controller.program.proxies import ControllerRefused, Link
from controller.program.wire import Channel, ChannelClosed, Frame, Inbox, error_frame
from controller.run.context import RunContext
from controller.run.spec import RunSpec, RunSpecError, load_run_spec


class ProgramCancelled(SocietyError):
    """The program ended by the cancellation the controller asked for."""

    reason = "cancelled"


def describe(spec: RunSpec) -> dict[str, Any]:
    """The ``run_spec`` as data: what the controller rebuilds its RunSpec from."""
    agents: dict[str, Any] = {}
    for name, descriptor in spec.agents.items():
        try:
            agents[name] = encode(descriptor)
        except CodecError as exc:
            raise RunSpecError(
                f"agent {name!r} is a {type(descriptor).__qualname__}, which cannot be sent to "
                f"the controller ({exc.detail}); a module's agents use the shipped runtimes "
                f"(scripted, llm, openclaw, nanoclaw, peer)",
                reason="runtime-not-shipped",
            ) from None
    return {
        "id": spec.id,
        "events": spec.events.tags,
        "agents": {"$map": agents},
        "message_limits": encode(spec.message_limits),
        "parameters": spec.parameters is not None,
    }


class Host:
    """The module's spec and program, answering the controller over ``channel``.

    ``parameters`` are answered in the channel's reader thread (module code that returns at
    once), link policies' verdicts in a thread of their own, in order (a slow policy holds up
    neither the reader nor the program's calls); ``execute`` and ``cancel`` go to the loop,
    where ``serve`` runs the program in a task of its own scope."""

    def __init__(self, channel: Channel, spec: RunSpec) -> None:
        self.channel = channel
        self.spec = spec
        self.link = Link(channel, spec.catalog)
        self._program: tuple[object, anyio.CancelScope] | None = None
        self._verdicts = ThreadPoolExecutor(1, thread_name_prefix="society-module-policies")

    async def serve(self) -> None:
        """Answer the controller until the channel closes, then end this process: nothing the
        module still runs, not even a program that ignores its cancellation, keeps it."""
        inbox = Inbox()

        def on_request(frame: Frame) -> None:
            if frame.get("op") in ("execute", "cancel"):
                inbox.post(frame)
            else:
                self._answer_here(frame)

        self.channel.start(on_request, on_end=_end_process)
        async with anyio.create_task_group() as tasks:
            await self._dispatch(inbox.frames, tasks)

    def _answer_here(self, frame: Frame) -> None:
        op, call_id = frame.get("op"), frame.get("id")
        if op == "parameters":
            self._parameters(call_id, frame.get("values"))
        elif op == "check-event":
            self._check_event(call_id, frame.get("event"), frame.get("strict") is True)
        elif op == "policy":
            self._verdicts.submit(
                self.link.evaluate, call_id, frame.get("policy"), frame.get("delivery")
            )
        else:
            unknown = ControllerRefused(
                f"the controller asked for {op!r}, which is no request here"
            )
            self.channel.reply(call_id, error=error_frame(unknown))

    async def _dispatch(
        self, frames: MemoryObjectReceiveStream[Frame], tasks: anyio.abc.TaskGroup
    ) -> None:
        async with frames:
            async for frame in frames:
                if frame.get("op") == "execute":
                    scope = anyio.CancelScope()
                    self._program = (frame.get("id"), scope)
                    tasks.start_soon(self._execute, frame.get("id"), frame.get("context"), scope)
                elif self._program is not None and frame.get("target") == self._program[0]:
                    self._program[1].cancel()

    def _check_event(self, call_id: object, wire: object, strict: bool) -> None:
        """A reader's question: does ``wire`` match the module's own class for its tag?"""
        try:
            if not isinstance(wire, dict):
                raise CodecError("an event to check is a JSON object")
            self.spec.events.decode(wire, strict=strict)
        except Exception as exc:
            self.channel.reply(call_id, error=error_frame(exc))
            return
        self.channel.reply(call_id, value=True)

    def _parameters(self, call_id: object, values: object) -> None:
        try:
            chosen = self.spec.parameters_from(dict(values) if isinstance(values, dict) else {})
            dumped = None if chosen is None else chosen.model_dump(mode="json")
        except Exception as exc:
            self.channel.reply(call_id, error=error_frame(exc))
            return
        self.channel.reply(call_id, value=dumped)

    async def _execute(self, call_id: object, context: object, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                ctx = self._context(self.link.decoder.decode(context))
                value = await self.spec.execute(ctx)
            except Exception as exc:
                self.channel.reply(call_id, error=error_frame(exc))
                return
            try:
                answer = encode(value)
            except CodecError as exc:  # the controller notes why, in the result and the ledger
                unsent = {"op": "result", "id": call_id, "unsent": _unsent(value, exc)}
                with contextlib.suppress(ChannelClosed):
                    self.channel.send(unsent)
                return
            self.channel.reply(call_id, value=answer)
            return
        cancelled = ProgramCancelled("the program was cancelled")
        self.channel.reply(call_id, error=error_frame(cancelled))

    def _context(self, sent: Any) -> RunContext:
        parameters = sent.get("parameters")
        model = self.spec.parameters
        chosen = model.model_validate(parameters) if model is not None and parameters else None
        fork = sent.get("fork")
        if fork is not None:
            fork.parameters = chosen
        handles: dict[str, AgentHandle[Any]] = dict(sent["agents"])
        return RunContext(
            agents=Roster(handles),
            network=sent["network"],
            events=sent["events"],
            ledger=sent["ledger"],
            parameters=chosen,
            fork=fork,
        )


def _unsent(value: object, error: CodecError) -> str:
    """What the program returned that cannot cross to the controller: its type and why."""
    return f"a {type(value).__qualname__} ({error})"[:MAX_UNSENT_CHARS]


def main(argv: list[str]) -> int:
    """Import the module, send its spec, serve the controller until the channel closes."""
    fd, module_path = int(argv[0]), argv[1]
    channel = Channel(socket.socket(fileno=fd), peer="controller")
    try:
        spec = load_run_spec(module_path)
        described = describe(spec)
    except Exception as exc:
        channel.send({"op": "spec-error", "error": error_frame(exc)})
        return 0

    async def serve() -> None:
        host = Host(channel, spec)
        channel.send({"op": "spec", "spec": described})
        await host.serve()

    anyio.run(serve)
    return 0


def _end_process() -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    with contextlib.suppress(ChannelClosed):
        main(sys.argv[1:])
    os._exit(0)  # threads the module started do not keep the process
