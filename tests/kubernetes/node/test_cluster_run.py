"""``society run --profile kind`` from outside the cluster, as a user runs it from a laptop, on the
real-pod tests' kind cluster: the default path runs the controller as the run's Job, whose pod
the router's Service selects, so the agents' pods reach the router.

On the code before this test the controller ran in the command's own process while agents
dialled ``society-router.<run>.svc``, a Service that selected no pod: the run could not start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cluster_support import make_cluster_queue
from cp_build import REPO_ROOT
from kind_plane import KindPlane

from controller.platforms.kubernetes import objects

pytestmark = pytest.mark.slow

SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def _stop_dev_server_under(artifacts: Path) -> None:
    """The Temporal dev server `society run` started under this test's artifact root."""
    try:
        pid = int(json.loads((artifacts / ".temporal" / "server.json").read_text())["pid"])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, KeyError):
        return
    if str(artifacts).encode() in cmdline:  # never a reused pid: it names this test's root
        os.kill(pid, signal.SIGKILL)


class RouterEndpoints:
    """Every ready endpoint the routers' Services had while the run went on: the pod behind
    each (``Pod/<namespace>/<name>``), polled from the EndpointSlices in a thread."""

    def __init__(self, plane: KindPlane) -> None:
        from kubernetes import client

        self.discovery = client.DiscoveryV1Api(plane.api_client())
        self.core = client.CoreV1Api(plane.api_client())
        self.seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> RouterEndpoints:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _poll(self) -> None:
        selector = f"kubernetes.io/service-name={objects.ROUTER_SERVICE}"
        while not self._stop.wait(0.5):
            try:
                slices = self.discovery.list_endpoint_slice_for_all_namespaces(
                    label_selector=selector
                ).items
                for item in slices:
                    for endpoint in item.endpoints or []:
                        ref = endpoint.target_ref
                        if ref is None or not (endpoint.conditions and endpoint.conditions.ready):
                            continue
                        key = f"{ref.kind}/{ref.namespace}/{ref.name}"
                        if key not in self.seen and ref.kind == "Pod":
                            pod = self.core.read_namespaced_pod(ref.name, ref.namespace)
                            self.seen[key] = dict(pod.metadata.labels or {})
            except Exception:  # a namespace deleted between list and read: poll again
                continue


def test_society_run_on_the_kind_profile_runs_the_negotiation_end_to_end(
    node_plane: KindPlane, tmp_path: Path
) -> None:
    assert node_plane.images is not None
    queue = make_cluster_queue(node_plane, cpu="4")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "SOCIETY_KUBECONFIG": str(node_plane.kubeconfig),
        "SOCIETY_IMAGE_MAP": str(node_plane.images.path),  # the plane's snapshot of the map
        "SOCIETY_CLUSTER_QUEUE": queue,
        "SOCIETY_STARTUP_TIMEOUT_S": "120",
        "SOCIETY_ADMISSION_TIMEOUT_S": "60",
    }
    for name in ("SOCIETY_CONTROLLER_JOB", "SOCIETY_ROUTER_ADDRESS", "TEMPORAL_ADDRESS"):
        env.pop(name, None)
    artifacts = tmp_path / "artifacts"
    example = REPO_ROOT / "examples" / "negotiation.py"
    with RouterEndpoints(node_plane) as endpoints:
        done = _society_run(env, artifacts, example)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "ProgramFinished" and result["exit"] == "success", result
    # The defect this guards against: agents dial the router's Service, which must have had a
    # ready endpoint, and that endpoint was the controller Job's pod (the default path).
    roles = [labels.get(objects.ROLE_LABEL) for labels in endpoints.seen.values()]
    assert roles == ["controller"], endpoints.seen


def _society_run(env: dict[str, str], artifacts: Path, example: Path) -> Any:
    try:
        return subprocess.run(
            [*SOCIETY, "run", "--profile", "kind", "--artifacts", str(artifacts), str(example)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        _stop_dev_server_under(artifacts)
