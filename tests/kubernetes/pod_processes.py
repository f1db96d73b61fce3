"""Test-only: run each agent pod's application as a local process while KWOK says it runs.

KWOK pods run nothing. To exercise the readiness gate end to end (bridge included), this watches
the run's pods; for each pod KWOK marks Running it reads back what the pod would be handed (its
command, its environment, the files and secrets Secrets it mounts, the router's CA), starts the
command locally in a scratch working directory, and serves as the platform's ``bridge_address``
hook so the controller's bridge reaches that process. URLs on the run's Service name (the router,
the model gateway) are rewritten to 127.0.0.1; the router's certificate names loopback too.
When the local process exits the pod's status is patched to terminated with its exit code
(what a kubelet would report); when the pod goes away the process is killed.

Nothing here is imported by ``controller``.
"""

from __future__ import annotations

import base64
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

    @classmethod
    @asynccontextmanager
    async def running(cls, kube: Kube, run_id: str) -> AsyncIterator[PodProcesses]:
        workdir = Path(tempfile.mkdtemp(prefix=f"pods-{run_id[:12]}-"))
        try:
            async with anyio.create_task_group() as tasks:
                pods = cls(kube, run_id, workdir, tasks)
                informer = Informer(
                    kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=agent"
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
                agent = pod["metadata"]["labels"].get(objects.AGENT_LABEL)
                phase = pod.get("status", {}).get("phase")
                terminating = bool(pod["metadata"].get("deletionTimestamp"))
                if agent and phase == "Running" and not terminating and agent not in self.started:
                    self.started[agent] = PodProcess(agent, name, _free_port())
                    self.tasks.start_soon(self._run, self.started[agent], pod)
                if terminating and agent in self.started and self.kill_on_delete:
                    _kill(self.started[agent])
            for name in list(informer.deleted):
                for entry in self.started.values():
                    if entry.pod == name and self.kill_on_delete:
                        _kill(entry)
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
        with suppress(Exception):
            await self._report_exit(entry)

    async def _secret(self, name: str) -> dict[str, bytes]:
        secret = await self.kube.get("Secret", name, self.run_id)  # created before the Sandbox
        assert secret is not None, name
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    async def _report_exit(self, entry: PodProcess) -> None:
        """What a kubelet would report: the container terminated with its exit code."""
        code = entry.returncode or 0
        signaled = code < 0
        terminated = {
            "exitCode": 128 - code if signaled else code,
            "reason": "Error" if code else "Completed",
            "startedAt": None,
        }
        if signaled:
            terminated["signal"] = -code
        body = {
            "status": {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": objects.AGENT_CONTAINER,
                        "ready": False,
                        "restartCount": 0,
                        "image": "",
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ],
            }
        }
        await self.kube._request(
            "PATCH",
            f"/api/v1/namespaces/{self.run_id}/pods/{entry.pod}/status",
            body=body,
            content_type="application/merge-patch+json",
        )


def _kill(entry: PodProcess) -> None:
    process = entry.process
    if process is None or process.returncode is not None:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
