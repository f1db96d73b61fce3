"""The run worker: polls one task queue and runs ``SocietyRun`` workflows and their activities.

``python -m controller.lifecycle.worker --task-queue society-runs`` against the Temporal
at ``TEMPORAL_ADDRESS`` (``TEMPORAL_NAMESPACE``, default ``default``). The worker Deployment runs
it (``access.worker_deployment``); anyone can run it beside a dev server. It prints one JSON line
once it polls, and on SIGTERM or SIGINT stops polling, lets running activities finish within
the grace period (then cancels them: a cancelled ``execute`` finalizes its ledger) and exits 0.

Unlike ``society run``'s own worker it serves other processes' submissions, so it holds no
per-run key and checks no proof (``submission``): whoever reaches its Temporal can submit to it
(and it runs the module content they send), which is why that Temporal must be reachable only
in-cluster or authenticate its clients (mTLS or an API key, as on GKE). ``society run
--task-queue`` submits to it (``remote``). It writes every run under its own artifact root
(``--artifacts``, default ``$SOCIETY_ARTIFACTS``; the chart sets it), never under the root a
request names, which is the submitter's; without either it uses the request's root. Its
cleanup exports the run directory where ``SOCIETY_LEDGER_EXPORT`` says and the workflow's result
says where (``export``).

The worker owns run namespaces (its prepare and cleanup activities), so it sets
``SOCIETY_KUBE_WORKER_NAMESPACES=1`` for the controllers it runs. In-cluster
(``SOCIETY_KUBE_IN_CLUSTER=1``) its ``execute`` runs a cluster run's controller as the run's
controller Job and observes it (docs/kubernetes.md, "In-cluster execution").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

from temporalio.worker import Worker

import controller.settings as settings
from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.server import (
    ADDRESS_ENV,
    TemporalUnavailable,
    configured_endpoint,
    connect,
)
from controller.lifecycle.workflow import SocietyRun
from controller.network.tuning import tune_for_router
from controller.profiles import CLUSTER_TASK_QUEUE

DEFAULT_TASK_QUEUE = CLUSTER_TASK_QUEUE
EXIT_UNAVAILABLE = 2


def _arguments(argv: list[str] | None, env: settings.Settings) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m controller.lifecycle.worker",
        description="Run SocietyRun workflows from one Temporal task queue.",
    )
    parser.add_argument(
        "--task-queue",
        default=env.get(settings.TASK_QUEUE) or DEFAULT_TASK_QUEUE,
        help="the task queue to poll (default: $SOCIETY_TASK_QUEUE, else %(default)s)",
    )
    parser.add_argument(
        "--artifacts",
        type=Path,
        default=env.get(settings.ARTIFACTS),
        metavar="DIR",
        help="where every run's directory goes, whatever root a request names "
        "(default: $SOCIETY_ARTIFACTS, else the request's root)",
    )
    parser.add_argument(
        "--max-concurrent-runs",
        type=int,
        default=4,
        help="runs (execute activities) this worker holds at once (default: %(default)s)",
    )
    parser.add_argument(
        "--grace-s",
        type=float,
        default=60.0,
        help="on SIGTERM, how long running activities may take before they are cancelled",
    )
    return parser.parse_args(argv)


async def serve(
    task_queue: str,
    *,
    max_concurrent_runs: int,
    grace_s: float,
    artifact_root: Path | None = None,
) -> int:
    """Poll ``task_queue`` until SIGTERM or SIGINT; 2 when no Temporal answers."""
    endpoint = configured_endpoint()
    if endpoint is None:
        print(
            f"society worker: error: {ADDRESS_ENV} is not set\n  next step: set it to the "
            f"Temporal frontend (host:port) the runs are submitted to",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    try:
        client = await connect(endpoint)
    except TemporalUnavailable as error:
        print(f"society worker: error: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    activities = LifecycleActivities(artifact_root=artifact_root)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[SocietyRun],
        activities=[activities.prepare, activities.execute, activities.cleanup],
        # one run's prepare or cleanup may overlap another run's execute
        max_concurrent_activities=2 * max_concurrent_runs,
        # Cancellation reaches an activity with a heartbeat; send one at least every second.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(seconds=grace_s),
    ):
        line = {"worker": "polling", "taskQueue": task_queue, "address": endpoint.address}
        print(json.dumps(line), flush=True)
        await stop.wait()
        print(json.dumps({"worker": "stopping", "taskQueue": task_queue}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    env = settings.Settings.read()
    arguments = _arguments(argv, env)
    # the worker's prepare and cleanup activities own each run's namespace
    settings.install(env.overlay({settings.KUBE_WORKER_NAMESPACES.name: "1"}))
    tune_for_router()  # a run's controller may host its router in this process
    return asyncio.run(
        serve(
            arguments.task_queue,
            max_concurrent_runs=arguments.max_concurrent_runs,
            grace_s=arguments.grace_s,
            artifact_root=(
                None if arguments.artifacts is None else env.artifact_root(arguments.artifacts)
            ),
        )
    )


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once the worker has stopped, skipping interpreter
    finalization: the Temporal client's native threads can outlive the event loop, and tearing
    the interpreter down beneath them can crash (SIGSEGV) a worker that already stopped cleanly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
