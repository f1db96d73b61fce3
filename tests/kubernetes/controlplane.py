"""A real Kubernetes control plane for tests, run as local child processes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK (fake nodes whose
pods become Running and Ready), the Kueue manager and the Agent Sandbox controller,
built by scripts/build-control-plane.sh at the versions pinned in kind/versions.env. Pods
that really run are kind's (kind_plane.py): this plane is for admission, scheduling and RBAC
at scale, where KWOK's fake nodes cost next to nothing.

    build = build_control_plane()
    with ControlPlane(build, nodes=2) as cp:
        api = cp.api_client()            # kubernetes.client.ApiClient, admin
        subprocess.run([...], env=cp.env())  # KUBECONFIG set

Everything listens on 127.0.0.1.

The parts: cp_build (building, manifests), cp_certificates (PKI), cp_processes (child
processes, probes), cp_core (etcd to KWOK), cp_addons (Kueue, Agent Sandbox). Test-only:
nothing here is imported by `controller`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cp_addons import KUEUE_CA_NAME, WEBHOOK_DNS_NAMES, start_agent_sandbox, start_kueue
from cp_build import (
    BUILD_SCRIPT,
    REPO_ROOT,
    VERSIONS_FILE,
    ControlPlaneBuild,
    ControlPlaneError,
    build_control_plane,
    find_go,
    read_versions,
)
from cp_certificates import Pki, write_kubeconfig, write_pki
from cp_core import start_apiserver, start_etcd, start_kube_controllers, start_kwok
from cp_images import Images
from cp_processes import KUBECONFIG_NAME, ProcessGroup, wait_until

__all__ = [
    "BUILD_SCRIPT",
    "REPO_ROOT",
    "VERSIONS_FILE",
    "ControlPlane",
    "ControlPlaneBuild",
    "ControlPlaneError",
    "Images",
    "NodeCapacity",
    "build_control_plane",
    "find_go",
    "pod_command",
    "read_versions",
    "wait_until",
]


@dataclass(frozen=True)
class NodeCapacity:
    """Allocatable resources of each fake KWOK node."""

    cpu: str = "16"
    memory: str = "64Gi"
    pods: str = "110"
    ephemeral_storage: str = "100Gi"
    """Real nodes report it; without it no pod with an ephemeral-storage limit schedules."""


@dataclass
class ControlPlane:
    """Start with `with ControlPlane(build) as cp:`; everything started is stopped on exit."""

    build: ControlPlaneBuild
    nodes: int = 2
    node_capacity: NodeCapacity = field(default_factory=NodeCapacity)
    kueue: bool = True
    agent_sandbox: bool = True
    kueue_frameworks: Sequence[str] = ("batch/job", "pod")
    startup_timeout: float = 180.0
    workdir: Path | None = None
    keep_workdir: bool = False

    def __post_init__(self) -> None:
        self.processes = ProcessGroup()
        self.processes.workdir = self.workdir
        self._owns_workdir = self.workdir is None
        self._failed = False

    # public surface ---------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.processes.path(KUBECONFIG_NAME)

    @property
    def address(self) -> str:
        """Where the API server listens."""
        return "127.0.0.1"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.processes.ports['apiserver']}"

    @property
    def bin_dir(self) -> Path:
        return self.build.bin_dir

    @property
    def manifest_dir(self) -> Path:
        return self.build.manifest_dir

    @property
    def node_names(self) -> list[str]:
        return [f"kwok-node-{index}" for index in range(self.nodes)]

    def log_path(self, component: str) -> Path:
        return self.processes.log_path(component)

    def env(self) -> dict[str, str]:
        """The caller's environment with KUBECONFIG pointing at this control plane."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def api_client(self) -> Any:
        """A new admin `kubernetes.client.ApiClient`."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def running_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout: float = 60.0,
    ) -> Iterator[Any]:
        """Yield each pod (V1Pod) once, when KWOK first reports it Running; ends after `timeout` s.

        This is the hook for tests that run a pod's application as a local process:
        `for pod in cp.running_pods(namespace=ns): subprocess.Popen(pod_command(pod), ...)`.
        """
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api_client())
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            kwargs: dict[str, Any] = {"timeout_seconds": max(1, int(remaining))}
            if label_selector:
                kwargs["label_selector"] = label_selector
            lister = core.list_pod_for_all_namespaces
            if namespace:
                lister, kwargs["namespace"] = core.list_namespaced_pod, namespace
            stream = watch.Watch().stream(lister, **kwargs)
            for event in stream:
                pod = event["object"]
                if (
                    event["type"] in ("ADDED", "MODIFIED")
                    and pod.status
                    and pod.status.phase == "Running"
                ):
                    if pod.metadata.uid not in seen:
                        seen.add(pod.metadata.uid)
                        yield pod
                if time.monotonic() > deadline:
                    return

    # lifecycle --------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="society-control-plane-"))
        self.processes.workdir = self.workdir
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        try:
            self.pki: Pki = write_pki(
                self.workdir / "pki",
                webhook_ca_name=KUEUE_CA_NAME,
                webhook_dns_names=WEBHOOK_DNS_NAMES,
            )
            self.processes.port("apiserver")
            write_kubeconfig(self.kubeconfig, self.server, self.pki)
            start_etcd(self)
            start_apiserver(self)
            start_kube_controllers(self)
            if self.nodes:
                start_kwok(self)
            if self.kueue:
                start_kueue(self)
            if self.agent_sandbox:
                start_agent_sandbox(self)
        except BaseException:
            self._failed = True  # keep the logs for the error message's reader
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component this instance started, newest first, by pid."""
        self.processes.stop()
        keep = self.keep_workdir or self._failed
        if self.workdir is not None and self._owns_workdir and not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def pod_command(pod: Any, container: str | None = None) -> list[str]:
    """The command + args of `container` (default: the first) in a V1Pod, to run it locally."""
    containers = pod.spec.containers
    chosen = (
        next((c for c in containers if c.name == container), None) if container else containers[0]
    )
    if chosen is None:
        raise ControlPlaneError(
            "no-such-container", f"pod {pod.metadata.name} has no container {container!r}"
        )
    return [*(chosen.command or []), *(chosen.args or [])]
