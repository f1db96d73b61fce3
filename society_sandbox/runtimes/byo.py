"""The ``byo`` runtime's contract, as data: its settings and the stdio mode's frames.

A ``byo`` agent is any program a researcher already has (a Python script on the stock
``openai`` SDK, a Node program), started in its sandbox by a launcher (``agent_images.byo``).
In ``client`` mode the program connects to the router itself with the wall package's client; in
``stdio`` mode the launcher is the agent's router session and the program speaks JSON lines: one
``ToProgram`` frame per line on its stdin, one ``FromProgram`` frame per line on its stdout.
Shared by the controller and the launcher, so it imports only pydantic.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

BYO_CONFIG_FILE = "byo.json"
"""Where the descriptor writes the program's settings, relative to its working directory."""
MAX_ARGS = 64
MAX_ARG_CHARS = 4096
MAX_LINE_BYTES = 256 * 1024
"""The longest stdout line a stdio program may write; a longer one is refused (``too-long``)."""
MODEL_ENVIRONMENT = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")
"""What the launcher sets for a program granted a model: the loopback relay and the agent's own
gateway token (never a provider key)."""
PYTHON_NAMES = ("python", "python3")
"""A command starting with one of these runs in the agents' own interpreter."""

Mode = Literal["client", "stdio"]


class BYOSettings(BaseModel):
    """The descriptor's choices, as the launcher reads them from ``byo.json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: tuple[Annotated[str, Field(min_length=1, max_length=MAX_ARG_CHARS)], ...] = Field(
        min_length=1, max_length=MAX_ARGS
    )
    mode: Mode = "client"
    packages: tuple[str, ...] = ()
    model: bool = False
    """Whether the run's model gateway is granted: the launcher then serves the relay."""


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


# ---- launcher -> program (stdin) ---------------------------------------------------------------


class HelloFrame(_Frame):
    """The first line: the program is connected to the router as ``name``."""

    type: Literal["hello"] = "hello"
    name: str
    participant_id: str = Field(alias="participantId")


class MessageFrame(_Frame):
    """A message delivered to the agent."""

    type: Literal["message"] = "message"
    sender: str = Field(alias="from")
    conversation: str
    participants: tuple[str, ...]
    text: str
    message_id: str = Field(alias="messageId")


class InstructionFrame(_Frame):
    """The owner handle's ``instruct(text)``."""

    type: Literal["instruction"] = "instruction"
    text: str


class OpenedFrame(_Frame):
    """The answer to an ``open``: the conversation's id."""

    type: Literal["opened"] = "opened"
    id: str | None = None
    conversation: str
    participants: tuple[str, ...]


class SentFrame(_Frame):
    """The answer to a ``send``: the router committed it as ``messageId``."""

    type: Literal["sent"] = "sent"
    id: str | None = None
    conversation: str
    message_id: str = Field(alias="messageId")


class ErrorFrame(_Frame):
    """A line the launcher could not act on; the program keeps running."""

    type: Literal["error"] = "error"
    id: str | None = None
    reason: str
    message: str


class StopFrame(_Frame):
    """The run asks the program to end (teardown, or the owner's ``stop``); its stdin closes."""

    type: Literal["stop"] = "stop"
    reason: str


ToProgram = (
    HelloFrame | MessageFrame | InstructionFrame | OpenedFrame | SentFrame | ErrorFrame | StopFrame
)


# ---- program -> launcher (stdout) --------------------------------------------------------------


class SendRequest(_Frame):
    """Say ``text``: in ``conversation``, or to the participants ``to`` (a conversation with them
    is opened once and reused)."""

    type: Literal["send"]
    id: str | None = Field(default=None, max_length=128)
    to: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] = Field(
        default=(), max_length=64
    )
    conversation: str | None = Field(default=None, max_length=128)
    text: str = Field(min_length=1, max_length=32 * 1024)


class OpenRequest(_Frame):
    """Open a conversation with the participants ``to``; answered by ``opened``."""

    type: Literal["open"]
    id: str | None = Field(default=None, max_length=128)
    to: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] = Field(
        min_length=1, max_length=64
    )


FromProgram = Annotated[SendRequest | OpenRequest, Field(discriminator="type")]
FROM_PROGRAM: TypeAdapter[SendRequest | OpenRequest] = TypeAdapter(FromProgram)


__all__ = [
    "BYO_CONFIG_FILE",
    "FROM_PROGRAM",
    "MODEL_ENVIRONMENT",
    "BYOSettings",
    "ErrorFrame",
    "HelloFrame",
    "InstructionFrame",
    "MessageFrame",
    "OpenRequest",
    "OpenedFrame",
    "SendRequest",
    "SentFrame",
    "StopFrame",
]
