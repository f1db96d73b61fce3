"""The controller Job's entrypoint: run the mounted RunSpec once, in-cluster, report the result.

``python -m controller.incluster.main``; everything comes from the Job's
environment (``access.controller_job``): ``SOCIETY_RUN_ID``, ``SOCIETY_RUN_MODULE`` (the mounted
module, imported only once it matches ``SOCIETY_RUN_MODULE_SHA256``), ``SOCIETY_RUN_SEED``,
``SOCIETY_PROFILE``, ``SOCIETY_ARTIFACTS``, ``SOCIETY_RESULT_PATH`` and the cluster settings.
The module runs in a child process of its own (``controller.program``), which this non-dumpable
process serves ``ctx`` to. The ``RunResult`` is printed and written to ``SOCIETY_RESULT_PATH``
(the container's termination message, which the run worker reads). SIGTERM (the pod deleted,
the Job deleted by a cancelled ``execute``) cancels the run: the kernel finalizes the ledger,
then the process exits 143 without a result. The exit status is 0 for a successful program,
1 otherwise; a module that does not match its digest is refused (one JSON line, exit 1) before
anything is imported.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio

import controller.settings as settings
from controller.incluster.controller_job import MODULE_DIGEST_ENV
from controller.network.tuning import tune_for_router
from controller.platforms.kubernetes import KubernetesPlatform
from controller.program.process import isolated_module
from controller.run import RunRequest, RunResult, execute_run
from controller.run.module_source import ModuleSourceError, digest

MESSAGE_LIMIT = 4096
"""The kubelet keeps at most this many bytes of a termination message."""
EXIT_TERMINATED = 128 + signal.SIGTERM
PR_SET_DUMPABLE = 4


def request_from_environment(env: Mapping[str, str]) -> RunRequest:
    return RunRequest(
        module_path=env[settings.RUN_MODULE.name],
        run_id=env[settings.RUN_ID.name],
        profile=env.get(settings.PROFILE.name, "kubernetes"),
        artifact_root=env.get(settings.ARTIFACTS.name, "/var/lib/society/artifacts"),
        seed=int(env[settings.RUN_SEED.name]) if env.get(settings.RUN_SEED.name) else None,
    )


def check_module(env: Mapping[str, str]) -> None:
    """The mounted module is the one the submitter sent (its digest travelled separately)."""
    path = Path(env[settings.RUN_MODULE.name])
    expected = env.get(MODULE_DIGEST_ENV)
    if not expected:
        raise ModuleSourceError(
            f"{MODULE_DIGEST_ENV} is not set: the controller imports a module only against its "
            f"digest; run it through the run worker's controller Job",
            reason="module-digest-missing",
        )
    if digest(path.read_text("utf-8")) != expected:
        raise ModuleSourceError(
            f"the mounted module {path} does not match its SHA-256 {expected}: it changed after "
            f"the run was submitted; submit the run again",
            reason="module-digest-mismatch",
        )


def termination_message(result: RunResult) -> str:
    """The result as JSON within ``MESSAGE_LIMIT`` bytes: the program's value (it stays in the
    ledger's program-succeeded record), usage, then the cause's tail, give way."""
    text = result.model_dump_json(by_alias=True)
    if len(text.encode()) <= MESSAGE_LIMIT:
        return text
    if result.value is not None:
        note = (
            "value-too-large: the controller Job reports at most 4,096 bytes; the ledger's "
            "society.program-succeeded/v2 record holds the value"
        )
        result = result.model_copy(update={"value": None, "value_note": note})
        text = result.model_dump_json(by_alias=True)
        if len(text.encode()) <= MESSAGE_LIMIT:
            return text
    result = result.model_copy(update={"usage": None})
    text = result.model_dump_json(by_alias=True)
    excess = len(text.encode()) - MESSAGE_LIMIT
    if excess > 0 and result.cause:
        cause = result.cause.encode()[: max(0, len(result.cause.encode()) - excess - 16)]
        shorter = cause.decode(errors="ignore") + " [truncated]"
        text = result.model_copy(update={"cause": shorter}).model_dump_json(by_alias=True)
    return text


async def run_controller(env: Mapping[str, str] | None = None) -> RunResult:
    """Run the request the environment names; SIGTERM cancels it (the kernel finalizes first)."""
    env = settings.current().environ if env is None else env
    check_module(env)
    request = request_from_environment(env)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)  # edge-triggered, like Temporal's cancel
    not_dumpable()
    try:
        # the module's own process defines the run_spec and runs the program: a plain child,
        # since the controller's container has no user namespaces to sandbox it in
        async with isolated_module(Path(request.module_path), sandboxed=False) as spec:
            platform = KubernetesPlatform.for_profile(request.profile)
            result = await execute_run(request, platform, spec=spec)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    if result_path := env.get(settings.RESULT_PATH.name):
        await anyio.Path(result_path).write_text(termination_message(result))
    return result


def not_dumpable() -> None:
    """Mark this process non-dumpable: a process of the same user without ``CAP_SYS_PTRACE`` (the
    module's) cannot trace it or read its memory, environment or descriptors in ``/proc``."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> int:
    settings.install(settings.Settings.read())  # the controller Job's one read
    tune_for_router()  # this process hosts the run's router
    try:
        result = anyio.run(run_controller)
    except ModuleSourceError as error:
        print(json.dumps({"controller": "refused", "reason": error.reason, "detail": str(error)}))
        return 1
    except (asyncio.CancelledError, KeyboardInterrupt):
        print('{"controller": "terminated"}', flush=True)
        return EXIT_TERMINATED
    print(result.model_dump_json(by_alias=True), flush=True)
    return 0 if result.exit == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
