"""A warm sandbox's first program: it holds the runtime's bridge port, takes the agent's identity
over it once (the claim), puts it where the boot contract says, and becomes the runtime.

    python3 -m agent_images.warm -- python3 -m agent_images.scripted

A warm pool's pods are made before any run exists, so nothing of an agent (name, router, seed,
secrets, files, variables) can be in their spec; and Agent Sandbox cold-starts a claim that
injects variables or volumes. So the controller that claimed the pod sends one JSON line to the
bridge port (``Provision``); this program writes the secrets file (0600) and the router's CA under
its private directory, the declared files into the working directory, closes the port, answers
``{"ok": true}`` (or, without closing, ``{"error": ...}`` and waits for the next try) and becomes
the runtime with the boot variables set, which then binds the same port for its bridge. A Python
runtime's command (``python3 -m MODULE ...``) runs in this process: what its ``__main__`` imports
was imported while the pod waited (``preload``), so a claimed pod starts its runtime without an
interpreter's start or its imports. Any other command is executed (``exec``).

Only the controllers of runs that claim reach a pool pod's bridge port, no agent does (the warm
namespace's network policies; docs/limits.md); the secrets travel as the cold path's Secret
volume does, inside the cluster.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import runpy
import socket
import sys
from pathlib import Path

from society_sandbox import boot
from society_sandbox.warm import MAX_PROVISION_BYTES, Provision, ProvisionError

PROVISION_TIMEOUT_S = 30.0
"""How long one connection may take to send its line."""
PRIVATE_DIR_ENV = "SOCIETY_WARM_PRIVATE_DIR"
"""Where the secrets file and the router CA go: a directory only this user reads (default
``/tmp/society``: the pod's ``tmp`` emptyDir)."""
WORKDIR_ENV = "SOCIETY_WARM_WORKDIR"
"""Where the declared files go (default: the working directory)."""


def install(provision: Provision, *, private: Path, workdir: Path) -> dict[str, str]:
    """Write what ``provision`` carries; returns the environment the runtime starts with."""
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    secrets = private / "secrets.json"
    _write(secrets, provision.secrets, 0o600)
    environment = {**os.environ, **provision.environment, boot.SECRETS_FILE: str(secrets)}
    if provision.router_ca is not None:
        ca = private / "router-ca.pem"
        _write(ca, provision.router_ca, 0o600)
        environment[boot.ROUTER_CA_FILE] = str(ca)
    for path, data in provision.files.items():
        target = workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        _write(target, data, 0o444)
    return environment


def _write(path: Path, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def take_provision(server: socket.socket, *, private: Path, workdir: Path) -> dict[str, str]:
    """Accept connections until one sends a provision that installs; answer each; return the
    runtime's environment, ``server`` closed."""
    while True:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(PROVISION_TIMEOUT_S)
            try:
                provision = Provision.from_line(_read_line(conn))
                environment = install(provision, private=private, workdir=workdir)
            except (ProvisionError, OSError) as exc:
                _answer(conn, {"error": str(exc)})
                continue
            # the port stops listening before the answer: whoever connects after it is refused
            # until the runtime binds the port, never taken into a backlog that closing resets
            server.close()
            _answer(conn, {"ok": True})
            return environment


def _read_line(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            raise ProvisionError("the connection closed before the provision line ended")
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_PROVISION_BYTES:
            raise ProvisionError(f"the provision line exceeds {MAX_PROVISION_BYTES} bytes")


def _answer(conn: socket.socket, body: dict[str, object]) -> None:
    try:
        conn.sendall(json.dumps(body).encode() + b"\n")
    except OSError:
        pass  # the controller gave up on this connection; it tries again


def preload(command: list[str]) -> str | None:
    """For ``python3 -m MODULE ...``: import now what ``MODULE.__main__`` imports at its top
    level, and return MODULE; ``None`` for any other command, or when that fails (the command
    is then executed as it is)."""
    if len(command) < 3 or not Path(command[0]).name.startswith("python") or command[1] != "-m":
        return None
    module = command[2]
    try:
        spec = importlib.util.find_spec(f"{module}.__main__") or importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        source = Path(origin).read_text() if origin and origin.endswith(".py") else ""
        for node in ast.parse(source).body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                importlib.import_module(node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
    except Exception:  # whatever a module raises, the exec path still works
        return None
    return module


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    command = args[1:] if args[:1] == ["--"] else args
    if not command:
        raise SystemExit("usage: python3 -m agent_images.warm -- COMMAND [ARG...]")
    port = int(os.environ.get(boot.BRIDGE_PORT) or "7400")
    private = Path(os.environ.get(PRIVATE_DIR_ENV) or "/tmp/society")
    workdir = Path(os.environ.get(WORKDIR_ENV) or os.getcwd())
    server = socket.create_server(("0.0.0.0", port), reuse_port=False)
    module = preload(command)
    environment = take_provision(server, private=private, workdir=workdir)  # closes the port
    sys.stdout.flush()
    if module is None:
        os.execvpe(command[0], command, environment)
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [command[0], *command[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
