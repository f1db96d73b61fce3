"""Test-only: run each agent pod's application as a local process while KWOK says it runs.

KWOK pods run nothing. To exercise the readiness gate end to end (bridge included), this watches
the run's pods; for each pod KWOK marks Running it reads back what the pod would be handed (its
command, its environment, the files and secrets Secrets it mounts, the router's CA), starts the
command locally in a scratch working directory, and serves as the platform's ``bridge_address``
hook so the controller's bridge reaches that process. URLs on the run's Service name (the router,
the model gateway) are rewritten to 127.0.0.1; the router's certificate names loopback too.
When the local process exits the pod's status is patched to terminated with its exit code
(what a kubelet would report); when the pod goes away the process is killed.

With ``role="controller"`` it runs the controller Job's pod instead: the RunSpec ConfigMap's
files, the artifacts volume mapped to a local directory, a token of the pod's ServiceAccount
(TokenRequest) where ``load_incluster_config`` reads it, and the termination message reported
with the exit. The controller's command runs under ``python pod_processes.py controller``, which
points the in-cluster config at that token and serves as the controller's own agent-pod hook
(the same class, ``role="agent"``) before it calls ``incluster.run_controller``. A deleted
controller pod gets SIGTERM, as from a kubelet.

Nothing here is imported by ``controller``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import Process, TaskGroup

from controller.platform.kubernetes import objects
from controller.platform.kubernetes.kube import Informer, Kube, Obj

REPO_ROOT = Path(__file__).resolve().parents[2]
HOOK = Path(__file__).resolve()


@dataclass
class PodProcess:
    agent: str
    pod: str
    port: int
    process: Process | None = None
    returncode: int | None = None


@dataclass
class PodProcesses:
    """``async with PodProcesses.running(kube, run_id) as pods:`` then pass ``pods.address``."""

    kube: Kube
    run_id: str
    workdir: Path
    tasks: TaskGroup
    started: dict[str, PodProcess] = field(default_factory=dict)
    _ready: dict[str, anyio.Event] = field(default_factory=dict)
    environments: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each started agent's environment, as the pod's spec gave it (service hosts local)."""
    kill_on_delete: bool = True
    role: str = "agent"
    artifact_root: Path | None = None
    """Where the controller pod's artifacts volume lives locally (``role="controller"``)."""
    admin_kubeconfig: str | None = None
    """Handed to the controller process for its own agent-pod hook (``role="controller"``)."""
    node: str | None = None
    """A node KWOK does not manage, whose kubelet this is (``role="controller"``): KWOK completes
    every Job pod on its own nodes at once, so the controller Job's pod must run elsewhere."""

    @classmethod
    @asynccontextmanager
    async def running(
        cls,
        kube: Kube,
        run_id: str,
        *,
        role: str = "agent",
        artifact_root: Path | None = None,
        admin_kubeconfig: str | None = None,
        node: str | None = None,
    ) -> AsyncIterator[PodProcesses]:
        workdir = Path(tempfile.mkdtemp(prefix=f"pods-{run_id[:12]}-"))
        try:
            async with anyio.create_task_group() as tasks:
                pods = cls(
                    kube,
                    run_id,
                    workdir,
                    tasks,
                    role=role,
                    artifact_root=artifact_root,
                    admin_kubeconfig=admin_kubeconfig,
                    node=node,
                )
                informer = Informer(
                    kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}={role}"
                )
                tasks.start_soon(informer.run)
                tasks.start_soon(pods._follow, informer)
                try:
                    yield pods
                finally:
                    for entry in pods.started.values():
                        _kill(entry)
                    tasks.cancel_scope.cancel()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def address(self, run_id: str, agent: str, default: tuple[str, int]) -> tuple[str, int]:
        """The platform's ``bridge_address`` hook: the local process's bridge."""
        await self._event(agent).wait()
        return "127.0.0.1", self.started[agent].port

    def _event(self, agent: str) -> anyio.Event:
        return self._ready.setdefault(agent, anyio.Event())

    async def _follow(self, informer: Informer) -> None:
        await informer.synced.wait()
        while True:
            changed = informer._changed  # taken before looking, so no change is missed
            for name, pod in list(informer.objects.items()):
                agent = pod["metadata"]["labels"].get(objects.AGENT_LABEL) or name
                phase = pod.get("status", {}).get("phase")
                terminating = bool(pod["metadata"].get("deletionTimestamp"))
                if self.node is not None and pod["spec"].get("nodeName") == self.node:
                    phase = "Running" if phase == "Pending" else phase  # this hook is its kubelet
                if agent and phase == "Running" and not terminating and agent not in self.started:
                    self.started[agent] = PodProcess(agent, name, _free_port())
                    run = self._run if self.role == "agent" else self._run_controller
                    self.tasks.start_soon(run, self.started[agent], pod)
                if terminating and agent in self.started and self.kill_on_delete:
                    _kill(self.started[agent], self._stop_signal)
            for name in list(informer.deleted):
                for entry in self.started.values():
                    if entry.pod == name and self.kill_on_delete:
                        _kill(entry, self._stop_signal)
            await changed.wait()

    async def _run(self, entry: PodProcess, pod: Obj) -> None:
        container = pod["spec"]["containers"][0]
        home = self.workdir / entry.agent
        work = home / "work"
        work.mkdir(parents=True)
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            secret_name = volumes[mount["name"]].get("secret", {}).get("secretName")
            if not secret_name:
                continue
            data = await self._secret(secret_name)
            target_dir = home / mount["mountPath"].lstrip("/")
            if mount["mountPath"].startswith(objects.WORKDIR):
                target_dir = work / Path(mount["mountPath"]).relative_to(objects.WORKDIR)
            if "subPath" in mount:
                target_dir.parent.mkdir(parents=True, exist_ok=True)
                target_dir.write_bytes(data[mount["subPath"]])
            else:
                target_dir.mkdir(parents=True, exist_ok=True)
                for key, value in data.items():
                    (target_dir / key).write_bytes(value)
                    (target_dir / key).chmod(0o600)

        def local(path: str) -> str:
            return str(home / path.lstrip("/"))

        service_host = objects.router_host(self.run_id)  # the router and the model gateway
        for name, value in list(env.items()):
            url = urlsplit(value)
            if url.hostname == service_host:
                env[name] = urlunsplit(url._replace(netloc=f"127.0.0.1:{url.port}"))
        self.environments[entry.agent] = dict(env)
        env |= {
            "SOCIETY_SECRETS_FILE": local(env["SOCIETY_SECRETS_FILE"]),
            "SOCIETY_ROUTER_CA_FILE": local(env["SOCIETY_ROUTER_CA_FILE"]),
            "SOCIETY_BRIDGE_PORT": str(entry.port),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "PYTHONPATH": str(REPO_ROOT),
        }
        command = list(container["command"]) + list(container.get("args") or [])
        if command[0] == "python":
            command[0] = sys.executable
        await self._start(entry, command, work, env, home)

    @property
    def _stop_signal(self) -> signal.Signals:
        return signal.SIGKILL if self.role == "agent" else signal.SIGTERM

    async def _run_controller(self, entry: PodProcess, pod: Obj) -> None:
        """The controller Job's pod: its command, files, ServiceAccount token and result."""
        container = pod["spec"]["containers"][0]
        home = self.workdir / entry.pod
        home.mkdir(parents=True)
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        local_mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            target = home / mount["mountPath"].lstrip("/")
            if "configMap" in volume:
                found = await self.kube.get("ConfigMap", volume["configMap"]["name"], self.run_id)
                assert found is not None, volume
                target.mkdir(parents=True, exist_ok=True)
                for key, value in (found.get("data") or {}).items():
                    (target / key).write_text(value)
            elif mount["name"] == "artifacts" and self.artifact_root is not None:
                target = self.artifact_root
            target.mkdir(parents=True, exist_ok=True)
            local_mounts[mount["mountPath"]] = target
        for name, value in list(env.items()):
            for path, local in local_mounts.items():
                if value == path or value.startswith(path + "/"):
                    env[name] = str(local) + value[len(path) :]
        message = home / "termination-log"
        env["SOCIETY_RESULT_PATH"] = str(message)
        account = self.workdir / entry.pod / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(await self._token(pod["spec"]["serviceAccountName"]))
        configuration = self.kube.api.configuration
        shutil.copyfile(configuration.ssl_ca_cert, account / "ca.crt")
        server = urlsplit(configuration.host)
        env |= {
            "KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(server.port or 443),
            "SOCIETY_TEST_SERVICEACCOUNT_DIR": str(account),
            "SOCIETY_TEST_KUBECONFIG": self.admin_kubeconfig or "",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "PYTHONPATH": str(REPO_ROOT),
        }
        assert container["command"][-2:] == ["-m", "controller.platform.kubernetes.incluster"]
        command = [sys.executable, str(HOOK), "controller"]
        if self.node is not None:
            await self._patch_status(entry, {"phase": "Running"})
        await self._start(entry, command, home, env, home, message=message)

    async def _token(self, account: str) -> str:
        """A token for the pod's ServiceAccount, as the kubelet would project it."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        }
        answer = await self.kube._request(
            "POST",
            f"/api/v1/namespaces/{self.run_id}/serviceaccounts/{account}/token",
            body=body,
        )
        token: str = answer["status"]["token"]
        return token

    async def _start(
        self,
        entry: PodProcess,
        command: list[str],
        cwd: Path,
        env: dict[str, str],
        home: Path,
        *,
        message: Path | None = None,
    ) -> None:
        work = cwd
        log = (home / "output.log").open("ab")
        try:
            entry.process = await anyio.open_process(
                command,
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self._event(entry.agent).set()
        try:
            entry.returncode = await entry.process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await entry.process.aclose()
        text = None
        if message is not None and await anyio.Path(message).exists():
            text = (await anyio.Path(message).read_text())[:4096]
        with suppress(Exception):
            await self._report_exit(entry, text)

    async def _secret(self, name: str) -> dict[str, bytes]:
        secret = await self.kube.get("Secret", name, self.run_id)  # created before the Sandbox
        assert secret is not None, name
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    async def _report_exit(self, entry: PodProcess, message: str | None = None) -> None:
        """What a kubelet would report: the container terminated with its exit code (and the
        termination message, if the process left one)."""
        code = entry.returncode or 0
        signaled = code < 0
        terminated = {
            "exitCode": 128 - code if signaled else code,
            "reason": "Error" if code else "Completed",
            "startedAt": None,
        }
        if signaled:
            terminated["signal"] = -code
        if message:
            terminated["message"] = message
        container = objects.AGENT_CONTAINER if self.role == "agent" else "controller"
        body = {
            "status": {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": container,
                        "ready": False,
                        "restartCount": 0,
                        "image": "",
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ],
            }
        }
        await self._patch_status(entry, body["status"])

    async def _patch_status(self, entry: PodProcess, status: dict[str, object]) -> None:
        await self.kube._request(
            "PATCH",
            f"/api/v1/namespaces/{self.run_id}/pods/{entry.pod}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )


def _kill(entry: PodProcess, signum: signal.Signals = signal.SIGKILL) -> None:
    process = entry.process
    if process is None or process.returncode is not None:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _controller_pod() -> int:
    """``python pod_processes.py controller``: the controller Job's command, as its pod runs it.

    The in-cluster config reads the ServiceAccount token the hook wrote; the controller's
    platform gets this module's agent-pod hook as its ``bridge_address`` (KWOK pods run nothing).
    """
    from kubernetes.aio.config import incluster_config

    import controller.platform
    from controller.platform.kubernetes import KubernetesPlatform, KubernetesSettings, incluster

    account = Path(os.environ["SOCIETY_TEST_SERVICEACCOUNT_DIR"])
    incluster_config.SERVICE_TOKEN_FILENAME = str(account / "token")  # type: ignore[attr-defined]
    incluster_config.SERVICE_CERT_FILENAME = str(account / "ca.crt")  # type: ignore[attr-defined]
    run_id = os.environ["SOCIETY_RUN_ID"]
    async with (
        Kube.connect(kubeconfig=os.environ["SOCIETY_TEST_KUBECONFIG"]) as admin,
        PodProcesses.running(admin, run_id) as pods,
    ):

        def platform_for(profile: str) -> KubernetesPlatform:
            return KubernetesPlatform(
                KubernetesSettings.from_environment(), bridge_address=pods.address
            )

        controller.platform.platform_for = platform_for  # type: ignore[assignment]
        try:
            result = await incluster.run_controller()
        except BaseException:
            print(json.dumps({"controller": "terminated"}), flush=True)
            raise
    print(result.model_dump_json(), flush=True)
    return 0 if result.exit == "success" else 1


if __name__ == "__main__" and sys.argv[1:] == ["controller"]:
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(anyio.run(_controller_pod))
