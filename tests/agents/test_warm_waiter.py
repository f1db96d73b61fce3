"""A warm sandbox's first program (agent_images/warm.py) as a real process: it holds the bridge
port, refuses what is not a provision and keeps waiting, writes what a provision carries where
the boot contract says, and becomes the runtime, which binds the same port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from society_sandbox import boot
from society_sandbox.warm import Provision

ROOT = Path(__file__).resolve().parents[2]

RUNTIME = """
import json, os, socket, sys
from pathlib import Path
bridge = socket.create_server(("0.0.0.0", int(os.environ["SOCIETY_BRIDGE_PORT"])))
report = {
    "env": {k: v for k, v in os.environ.items() if k.startswith(("SOCIETY_", "ACME_"))},
    "secrets": Path(os.environ["SOCIETY_SECRETS_FILE"]).read_text(),
    "secrets_mode": oct(os.stat(os.environ["SOCIETY_SECRETS_FILE"]).st_mode & 0o777),
    "ca": Path(os.environ["SOCIETY_ROUTER_CA_FILE"]).read_text(),
    "policy": Path("conf/policy.json").read_text(),
    "pid": os.getpid(),
}
conn, _ = bridge.accept()
conn.sendall(json.dumps(report).encode() + b"\\n")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(
    tmp_path: Path, command: list[str], pythonpath: str = str(ROOT)
) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = _free_port()
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        boot.BRIDGE_PORT: str(port),
        "SOCIETY_WARM_PRIVATE_DIR": str(tmp_path / "private"),
        "SOCIETY_WARM_WORKDIR": str(workdir),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_images.warm", "--", *command], cwd=workdir, env=env
    )
    return process, port, workdir


@pytest.fixture
def waiter(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    started = _start(tmp_path, [sys.executable, "-c", RUNTIME])
    try:
        yield started
    finally:
        started[0].kill()
        started[0].wait()


def _exchange(port: int, line: bytes, *, limit_s: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(line)
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                answer = json.loads(data)
                assert isinstance(answer, dict)
                return answer
        except (ConnectionRefusedError, json.JSONDecodeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _provision(**changes: object) -> Provision:
    base: dict[str, object] = {
        "environment": {
            boot.AGENT_NAME: "alice",
            boot.ROUTER_URL: "wss://society-router.sr-x.svc:7300",
            boot.ROUTER_ADDRESS: "10.96.0.12:7300",
            boot.RUN_SEED: "7",
            "ACME_MODE": "strict",
        },
        "secrets": b'{"routerToken": "r", "bridgeToken": "b", "credentials": {}}',
        "router_ca": b"-----BEGIN CERTIFICATE-----\n",
        "files": {"conf/policy.json": b'{"rules": []}'},
    }
    return Provision(**(base | changes))  # type: ignore[arg-type]


def test_a_provision_becomes_the_runtime_with_its_variables_secrets_and_files(
    waiter: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    process, port, _ = waiter
    assert _exchange(port, _provision().to_line()) == {"ok": True}
    report = _exchange(port, b"")  # the runtime now holds the port, in the same process
    env = report["env"]
    assert isinstance(env, dict)
    assert env[boot.AGENT_NAME] == "alice" and env["ACME_MODE"] == "strict"
    assert env[boot.ROUTER_ADDRESS] == "10.96.0.12:7300"
    assert report["secrets"] == '{"routerToken": "r", "bridgeToken": "b", "credentials": {}}'
    assert report["secrets_mode"] == "0o600"
    assert report["ca"] == "-----BEGIN CERTIFICATE-----\n"
    assert report["policy"] == '{"rules": []}'
    assert report["pid"] == process.pid  # it became the runtime (exec), not a child of it


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json\n", "not a provision line"),
        (b'{"environment": {}}\n', "not a provision line"),
        (_provision(files={"../escape": b"x"}).to_line(), "is not relative"),
        (_provision(files={"/etc/cron.d/x": b"x"}).to_line(), "is not relative"),
    ],
)
def test_what_is_not_a_provision_is_refused_and_the_sandbox_keeps_waiting(
    waiter: tuple[subprocess.Popen[bytes], int, Path], line: bytes, why: str
) -> None:
    process, port, workdir = waiter
    answer = _exchange(port, line)
    assert why in str(answer.get("error")), answer
    assert process.poll() is None
    assert not (workdir.parent / "escape").exists()
    assert _exchange(port, _provision().to_line()) == {"ok": True}


def test_a_file_planted_where_a_declared_file_goes_is_not_followed(
    waiter: tuple[subprocess.Popen[bytes], int, Path], tmp_path: Path
) -> None:
    _, port, workdir = waiter
    target = tmp_path / "outside"
    (workdir / "conf").mkdir()
    (workdir / "conf" / "policy.json").symlink_to(target)
    answer = _exchange(port, _provision().to_line())
    assert "File exists" in str(answer.get("error")), answer
    assert not target.exists()


def test_a_python_runtime_module_is_imported_while_waiting_and_runs_in_the_same_process(
    tmp_path: Path,
) -> None:
    """``python3 -m MODULE``: what its ``__main__`` imports is imported before any provision (a
    claimed pod then starts no interpreter), and it runs with the provision's variables."""
    package = tmp_path / "lib" / "acme_runtime"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    marker = tmp_path / "imported"
    (package / "agent.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('yes')\n"
        f"def main():\n    exec(compile({RUNTIME!r}, 'runtime', 'exec'), {{}})\n"
    )
    (package / "__main__.py").write_text("from acme_runtime.agent import main\n\nmain()\n")
    process, port, _ = _start(
        tmp_path,
        [sys.executable, "-m", "acme_runtime"],
        pythonpath=f"{ROOT}{os.pathsep}{tmp_path / 'lib'}",
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the runtime's module was not imported before its provision"
        marker.unlink()
        assert _exchange(port, _provision().to_line()) == {"ok": True}
        report = _exchange(port, b"")
        env = report["env"]
        assert isinstance(env, dict) and env[boot.AGENT_NAME] == "alice"
        assert report["pid"] == process.pid
        assert not marker.exists()  # not imported again: the preloaded module ran
    finally:
        process.kill()
        process.wait()
