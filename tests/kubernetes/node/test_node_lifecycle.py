"""The real node starts and stops with the harness and leaves nothing behind: no process, mount,
network namespace, interface, route, cgroup or changed kernel setting; a second start works."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from controlplane import ControlPlane, Images, build_control_plane, wait_until
from cp_node import KUBELET_SYSCTLS, node_leftovers

pytestmark = pytest.mark.slow


def _links() -> str:
    lines = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return "\n".join(sorted(line.split(":")[1].strip() for line in lines.splitlines()))


def _routes() -> str:
    return subprocess.run(["ip", "route"], capture_output=True, text=True).stdout


def _sysctls() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text().strip() for name in KUBELET_SYSCTLS}


def _mounts() -> set[str]:
    """The host's mounts, less those of any test control plane's work directory: another plane
    (this session's shared one, or another worktree's) mounts and unmounts there meanwhile.
    This plane's own are checked apart: none is left under its work directory."""
    points = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return {p for p in points if not p.startswith("/tmp/society-control-plane-")}


def _mounts_under(root: Path) -> list[str]:
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(f"{root}/")]


def _run_a_pod(plane: ControlPlane, image: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(plane.api_client())
    core.create_namespace({"metadata": {"name": "lifecycle"}})
    wait_until(
        "the default ServiceAccount",
        lambda: core.read_namespaced_service_account("default", "lifecycle"),
        30,
    )
    pod = {
        "metadata": {"name": "sleeper"},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["python3", "-c", "import time; time.sleep(600)"],
                }
            ],
        },
    }
    core.create_namespaced_pod("lifecycle", pod)

    def running() -> bool:
        return core.read_namespaced_pod("sleeper", "lifecycle").status.phase == "Running"

    wait_until("the sleeper pod Running", running, 120)


def test_the_node_stops_clean_and_starts_again(node_images: Images) -> None:
    build = build_control_plane()
    links, routes, sysctls, mounts = _links(), _routes(), _sysctls(), _mounts()
    for _ in range(2):  # the second start proves the first left nothing in the way
        plane = ControlPlane(
            build, nodes=0, kueue=False, agent_sandbox=False, real_node=True, images=node_images
        )
        with plane:
            assert plane.node is not None and plane.network is not None
            _run_a_pod(plane, node_images.ref("scripted"))
            assert plane.network.host_link in _links()
            node, network = plane.node, plane.network
        assert node_leftovers(node) == []
        assert network.holder is not None and network.holder.poll() is not None
        assert _links() == links
        assert _routes() == routes
        assert _sysctls() == sysctls
        assert _mounts() == mounts
        assert plane.workdir is not None and _mounts_under(plane.workdir) == []
        assert not plane.workdir.exists()
