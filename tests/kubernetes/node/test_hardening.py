"""An agent's pod as the platform writes it (``objects.sandbox``), created through Agent Sandbox in
a run namespace (``prepare_run_namespace``: Pod Security ``restricted`` enforced), asserted on
the running container from inside it: non-root, no ServiceAccount token (so the API server
refuses it the run's signing key), seccomp RuntimeDefault, no capabilities, no privilege
escalation, a read-only root with writable volumes only where needed, CPU/memory/ephemeral-storage
limits and emptyDir size limits."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import anyio
import pytest
from cp_images import Images
from kind_plane import KindPlane
from plane import wait_until

from controller.agents import scripted
from controller.incluster import access
from controller.platforms.kubernetes import Kube, objects, prepare_run_namespace
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.slow]

INSPECT = r"""
import json, os, ssl, sys, urllib.error, urllib.request
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
def writable(path):
    try:
        with open(os.path.join(path, ".probe"), "w") as handle:
            handle.write("x")
        os.remove(os.path.join(path, ".probe"))
        return True
    except OSError:
        return False
def read(path):
    try:
        return open(path).read().strip()
    except OSError as exc:
        return type(exc).__name__
def api_status(path):
    # what an agent gets asking the API server for a Secret with the credentials it has (none)
    host, port = (os.environ.get(f"KUBERNETES_SERVICE_{v}") for v in ("HOST", "PORT"))
    if not host:
        return "no KUBERNETES_SERVICE_HOST"
    try:
        urllib.request.urlopen(f"https://{host}:{port}{path}", timeout=10,
                               context=ssl._create_unverified_context())
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "seccomp": status["Seccomp"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "cap_eff": status["CapEff"].strip(), "cap_prm": status["CapPrm"].strip(),
    "token": os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"),
    "account_dir": os.path.exists("/var/run/secrets/kubernetes.io"),
    "signing_key": api_status(sys.argv[1]),
    "root_writable": writable("/"), "opt_writable": writable("/opt/society"),
    "work_writable": writable("/home/agent/work"), "tmp_writable": writable("/tmp"),
    "memory_limit": read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    "cpu_quota": read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
}))
"""


def _exec(
    plane: KindPlane,
    namespace: str,
    pod: str,
    command: list[str],
    container: str = objects.AGENT_CONTAINER,
) -> str:
    from kubernetes import client
    from kubernetes.stream import stream

    core = client.CoreV1Api(plane.api_client())
    output: str = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=container,
        command=command,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    return output


def test_the_agent_pod_runs_hardened(node_plane: KindPlane, node_images: Images) -> None:
    from kubernetes import client

    run_id = new_run_id()
    descriptor = dataclasses.replace(
        scripted(image=node_images.ref("scripted")),
        command=("python3", "-c", "import time; time.sleep(600)"),
    )
    manifest = objects.sandbox(
        run_id,
        "alice",
        descriptor,
        router_url=f"wss://society-router.{run_id}.svc:7443",
        seed=1,
        shutdown_at=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
    )

    async def create() -> None:
        async with Kube.connect(kubeconfig=str(node_plane.kubeconfig)) as kube:
            owner = await prepare_run_namespace(kube, run_id)
            secrets = objects.agent_secrets(run_id, "alice", b"{}", descriptor.files)
            ca = objects.router_ca(run_id, b"-----BEGIN CERTIFICATE-----\n")
            signing = access.signing_key_secret(run_id, b"-----BEGIN PRIVATE KEY-----\n")
            for obj in (secrets, ca, signing, manifest):
                await kube.apply(objects.owned(obj, owner))

    anyio.run(create)
    core = client.CoreV1Api(node_plane.api_client())
    try:
        namespace = core.read_namespace(run_id)
        assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
        selector = f"{objects.AGENT_LABEL}=alice"

        def running() -> Any:
            pods = core.list_namespaced_pod(run_id, label_selector=selector).items
            return pods[0] if pods and pods[0].status.phase == "Running" else None

        pod = wait_until("alice's pod Running", running, 120)
        signing_key = f"/api/v1/namespaces/{run_id}/secrets/{access.SIGNING_SECRET}"
        inspect = ["python3", "-c", INSPECT, signing_key]
        seen = json.loads(_exec(node_plane, run_id, pod.metadata.name, inspect).strip())
        assert (seen["uid"], seen["gid"]) == (objects.NON_ROOT_ID, objects.NON_ROOT_ID)
        assert seen["seccomp"] == "2"  # a filter: RuntimeDefault
        assert seen["no_new_privs"] == "1"
        assert int(seen["cap_eff"], 16) == 0 and int(seen["cap_prm"], 16) == 0
        assert seen["token"] is False and seen["account_dir"] is False
        # the operator's key is in the namespace, and the API server (reachable: this namespace
        # has no NetworkPolicy) refuses it to a request carrying no credentials
        assert core.read_namespaced_secret(access.SIGNING_SECRET, run_id) is not None
        assert seen["signing_key"] in (401, 403), seen
        assert not seen["root_writable"] and not seen["opt_writable"]
        assert seen["work_writable"] and seen["tmp_writable"]
        limit_mib = descriptor.resources.memory_limit_mib
        assert int(seen["memory_limit"]) == limit_mib * 1024 * 1024, seen
        assert int(seen["cpu_quota"]) > 0, seen
        # the keeper (PID 1 of its container) handles SIGTERM, so the pod deletes promptly
        status = ["cat", "/proc/1/status"]
        keeper = _exec(node_plane, run_id, pod.metadata.name, status, objects.KEEPER_CONTAINER)
        caught = next(line for line in keeper.splitlines() if line.startswith("SigCgt:"))
        assert int(caught.split()[1], 16) & (1 << (15 - 1)), caught  # SIGTERM is signal 15
        container = next(c for c in pod.spec.containers if c.name == objects.AGENT_CONTAINER)
        assert container.resources.limits["ephemeral-storage"] == objects.EPHEMERAL_LIMIT
        volumes = {v.name: v for v in pod.spec.volumes}
        assert volumes["work"].empty_dir.size_limit == objects.WORK_SIZE
        assert volumes["tmp"].empty_dir.size_limit == objects.TMP_SIZE
    finally:
        core.delete_namespace(run_id)
