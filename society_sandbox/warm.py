"""The warm-start provision message: what a claiming controller sends a warm sandbox's first
program (``agent_images/warm.py``) over its bridge port, one JSON line."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import PurePosixPath

MAX_PROVISION_BYTES = 16 * 1024 * 1024
"""A provision carries the declared files; the cold path's Secret holds at most 1 MiB of them, a
Pod's variables far less: this bounds a line comfortably above both."""


class ProvisionError(ValueError):
    """A provision line this sandbox cannot take; the message says which part is wrong."""


@dataclass(frozen=True, slots=True)
class Provision:
    """What the claiming controller sends: the agent's variables (boot variables included, save
    the two paths this program fills), its secrets file's body, the router's CA and its files."""

    environment: dict[str, str]
    secrets: bytes
    router_ca: bytes | None
    files: dict[str, bytes]

    def to_line(self) -> bytes:
        body = {
            "environment": self.environment,
            "secrets": base64.b64encode(self.secrets).decode(),
            "routerCa": None if self.router_ca is None else self.router_ca.decode(),
            "files": {path: base64.b64encode(data).decode() for path, data in self.files.items()},
        }
        return json.dumps(body, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Provision:
        try:
            body = json.loads(line)
            environment = body["environment"]
            files = body.get("files") or {}
            if not isinstance(environment, dict) or not isinstance(files, dict):
                raise TypeError("environment and files are objects")
            ca = body.get("routerCa")
            return cls(
                environment={str(k): str(v) for k, v in environment.items()},
                secrets=base64.b64decode(body["secrets"], validate=True),
                router_ca=None if ca is None else str(ca).encode(),
                files={
                    _relative(path): base64.b64decode(data, validate=True)
                    for path, data in files.items()
                },
            )
        except ProvisionError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise ProvisionError(f"not a provision line ({type(exc).__name__}: {exc})") from None


def _relative(path: object) -> str:
    """A declared file's path: relative, without ``..`` (it lands in the working directory)."""
    text = str(path)
    parts = PurePosixPath(text).parts
    if not parts or text.startswith("/") or ".." in parts or "\x00" in text:
        raise ProvisionError(f"file path {text!r} is not relative to the working directory")
    return text
