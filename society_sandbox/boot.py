"""What every agent sandbox is handed at start, on every profile: a few variables and two files.

The platform sets the ``SOCIETY_*`` variables below, writes the runtime's declared files into the
working directory, and writes the private secrets file (mode 0600): the router token, the bridge
token and the runtime's declared credentials. Secret values never travel in the environment.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

AGENT_NAME = "SOCIETY_AGENT_NAME"
ROUTER_URL = "SOCIETY_ROUTER_URL"
ROUTER_CA_FILE = "SOCIETY_ROUTER_CA_FILE"
ROUTER_ADDRESS = "SOCIETY_ROUTER_ADDRESS"
"""Where to dial the router (``host:port``) when the URL's host does not resolve in the sandbox
(a warm pod, made before the run's router existed); the URL still names it in TLS and the
handshake."""
ROUTER_SOCKET = "SOCIETY_ROUTER_SOCKET"
"""Local sandbox only: the router's Unix socket (the sandbox has no other way out)."""
BRIDGE_PORT = "SOCIETY_BRIDGE_PORT"
BRIDGE_FD = "SOCIETY_BRIDGE_FD"
"""Local profile only: an already-listening socket for the bridge, so ports never collide."""
SECRETS_FILE = "SOCIETY_SECRETS_FILE"
RUN_SEED = "SOCIETY_RUN_SEED"

BOOT_VARIABLES = (
    AGENT_NAME,
    ROUTER_URL,
    ROUTER_CA_FILE,
    ROUTER_ADDRESS,
    ROUTER_SOCKET,
    BRIDGE_PORT,
    BRIDGE_FD,
    SECRETS_FILE,
    RUN_SEED,
)

DEFAULT_SECRETS_FILE = ".society/secrets.json"


class BootError(Exception):
    """The sandbox was not set up as the boot contract says; the message names what is missing."""


@dataclass(frozen=True, slots=True)
class Secrets:
    """The contents of the secrets file. Never log it."""

    router_token: str
    bridge_token: str
    credentials: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        body = {
            "routerToken": self.router_token,
            "bridgeToken": self.bridge_token,
            "credentials": dict(self.credentials),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def read(cls, path: Path) -> Secrets:
        try:
            body = json.loads(path.read_bytes())
            return cls(
                router_token=str(body["routerToken"]),
                bridge_token=str(body["bridgeToken"]),
                credentials={str(k): str(v) for k, v in dict(body.get("credentials", {})).items()},
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BootError(f"cannot read the secrets file {path}: {type(exc).__name__}") from None


@dataclass(frozen=True, slots=True)
class BootConfig:
    """The sandbox's boot variables, read from the environment."""

    agent_name: str
    router_url: str
    bridge_port: int
    seed: int
    secrets_file: Path
    bridge_fd: int | None = None
    router_ca_file: str | None = None
    router_socket: str | None = None
    router_address: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> BootConfig:
        env = os.environ if environ is None else environ
        missing = [name for name in (AGENT_NAME, ROUTER_URL, BRIDGE_PORT) if not env.get(name)]
        if missing:
            raise BootError(f"the sandbox lacks {', '.join(missing)}; start it through a platform")
        fd = env.get(BRIDGE_FD)
        return cls(
            agent_name=env[AGENT_NAME],
            router_url=env[ROUTER_URL],
            bridge_port=int(env[BRIDGE_PORT]),
            seed=int(env.get(RUN_SEED, "0")),
            secrets_file=Path(env.get(SECRETS_FILE) or DEFAULT_SECRETS_FILE),
            bridge_fd=int(fd) if fd else None,
            router_ca_file=env.get(ROUTER_CA_FILE) or None,
            router_socket=env.get(ROUTER_SOCKET) or None,
            router_address=env.get(ROUTER_ADDRESS) or None,
        )

    def bridge_socket(self) -> socket.socket:
        """The listening bridge socket: inherited (local profile; a Unix socket in the sandbox) or
        bound here (a container)."""
        if self.bridge_fd is not None:
            return socket.socket(fileno=self.bridge_fd)
        sock = socket.create_server(("0.0.0.0", self.bridge_port), reuse_port=False)
        return sock
