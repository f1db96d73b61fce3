"""One run's sandboxes on a cluster: Kueue admission, one Agent Sandbox per agent, readiness,
termination as evidence, teardown.

Three informers (Sandboxes, Pods, the Workload; all labelled with the run id) keep the session's
view of the namespace; every wait below is level-triggered on that view, never a sleep loop.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import TaskGroup

from controller.agents.runtime import Harvest, RuntimeDescriptor, SandboxAccess
from controller.agents.termination import Observation, ProcessExit
from controller.events.run import HarvestOutcome, PodSetAdmission, QueueAdmission
from controller.platform.kubernetes import access, objects
from controller.platform.kubernetes.kube import Informer, Kube, KubeError, Obj, condition, is_true
from controller.run.platform import (
    Admission,
    AdmissionRefused,
    AgentLaunch,
    HarvestedItem,
    PlatformError,
    PlatformSession,
    RunPlacement,
    Sandbox,
    SandboxStartError,
)

if TYPE_CHECKING:
    from controller.platform.kubernetes.platform import KubernetesPlatform

T = TypeVar("T")

BridgeAddress = Callable[[str, str, tuple[str, int]], Awaitable[tuple[str, int]]]
"""``(run_id, agent, (host, port)) -> (host, port)``: where the controller reaches a bridge.
The default is the Sandbox's Service name and the runtime's bridge port; tests that run pods'
applications as local processes replace it (test-only)."""

_DELETE_WAIT_S = 30.0
_LOG_TIMEOUT_S = 5.0
_EXEC_TIMEOUT_S = 30.0
_ABSENT, _OVERSIZE, _REFUSED = 66, 65, 67
_READ_FILE = f"""
import os, stat, sys
root = os.path.realpath(sys.argv[1])
path = os.path.realpath(os.path.join(root, sys.argv[2]))
limit = int(sys.argv[3])
if os.path.commonpath([root, path]) != root:
    sys.stderr.write("the path leads outside the working directory")
    sys.exit({_REFUSED})
try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
except FileNotFoundError:
    sys.exit({_ABSENT})
info = os.fstat(fd)
if not stat.S_ISREG(info.st_mode):
    sys.stderr.write("not a regular file")
    sys.exit({_REFUSED})
if info.st_size > limit:
    print(info.st_size)
    sys.exit({_OVERSIZE})
with os.fdopen(fd, "rb") as handle:
    sys.stdout.buffer.write(handle.read(limit + 1))
"""
"""Runs in the keeper container (the agent's image has Python): one declared file to stdout;
exit 66 absent, 65 oversize (its size on stdout), 67 refused (outside the working directory or
not a regular file)."""


class KubernetesSandbox(Sandbox):
    def __init__(self, name: str, access: SandboxAccess, pod: str) -> None:
        self.name = name
        self.access = access
        self.pod = pod
        self.log: bytes | None = None
        self.log_detail: str | None = None


class KubernetesSession(PlatformSession):
    """See the module docstring; built by ``KubernetesPlatform.session``."""

    def __init__(
        self,
        platform: KubernetesPlatform,
        kube: Kube,
        placement: RunPlacement,
        owner: Obj,
        tasks: TaskGroup,
    ) -> None:
        self.platform = platform
        self.kube = kube
        self.placement = placement
        self.run_id = placement.run_id
        self.owner = owner
        self._tasks = tasks
        self._changed = anyio.Event()
        selector = objects.run_selector(self.run_id)
        self.sandboxes, self.pods, self.workloads = (
            Informer(kube, kind, self.run_id, label_selector=selector, notify=self._notify)
            for kind in ("Sandbox", "Pod", "Workload")
        )
        self._sandboxes: list[KubernetesSandbox] = []
        self._service_ports: set[int] = set()
        """Ports of run services in the controller (the model gateway) agents may reach."""
        self._network_lock = anyio.Lock()
        self._secrets_read: dict[str, Obj] = {}
        """Credential Secrets read by name, once per run (an absent one as ``{}``)."""
        self._shutdown_at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
            seconds=platform.settings.run_deadline_s
        )

    # ---- the view ----------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, check: Callable[[], T | None]) -> T:
        """Wait until ``check()`` is not ``None``, re-evaluated after every change seen."""
        for informer in (self.sandboxes, self.pods, self.workloads):
            await informer.synced.wait()
        while True:
            changed = self._changed
            result = check()
            if result is not None:
                return result
            await changed.wait()

    async def open(self) -> None:
        """The router's Service, its CA, the network policies; then start watching."""
        tls = self.platform.tls_for(self.run_id)
        await self._apply_network()
        if tls is not None:
            await self.kube.apply(
                objects.owned(objects.router_ca(self.run_id, tls.ca_pem), self.owner)
            )
        for informer in (self.sandboxes, self.pods, self.workloads):
            self._tasks.start_soon(informer.run)

    async def _apply_network(self) -> None:
        """The router's Service and the policies, for the router and every run service's port."""
        port = _port(self.placement.router_url)
        bridge_ports = sorted({d.bridge_port for d in self.platform.roster.values()})
        manifests = [
            objects.router_service(self.run_id, port, sorted(self._service_ports)),
            *objects.network_policies(
                self.run_id,
                controller_ports=[port, *self._service_ports],
                bridge_ports=bridge_ports,
            ),
        ]
        for manifest in manifests:
            await self.kube.apply(objects.owned(manifest, self.owner))

    async def _advertise_services(self, launch: AgentLaunch) -> RuntimeDescriptor:
        """``launch``'s descriptor with run services' URLs pointing at the router's Service.

        A variable a run service granted (absent from the roster's descriptor) whose URL's host
        is where the controller listens names a service in the controller (the model gateway):
        agents reach it through the per-run Service, and the policies let them, on its port.
        """
        descriptor = launch.descriptor
        declared = self.platform.roster[launch.name].environment
        environment = dict(descriptor.environment)
        ports: set[int] = set()
        for name, value in descriptor.environment.items():
            if declared.get(name) == value:
                continue
            url = urlsplit(value)
            if (
                url.scheme in ("http", "https", "ws", "wss")
                and url.hostname == self.platform.router_host
                and url.port is not None
            ):
                host = objects.router_host(self.run_id)
                environment[name] = urlunsplit(url._replace(netloc=f"{host}:{url.port}"))
                ports.add(url.port)
        async with self._network_lock:
            if not ports <= self._service_ports:
                self._service_ports |= ports
                await self._apply_network()
        return dataclasses.replace(descriptor, environment=environment)

    # ---- admission ---------------------------------------------------------------------------

    async def admit(self, admission: Admission) -> Admission:
        settings = self.platform.settings
        sets = self.platform.pod_sets
        await self.kube.apply(
            objects.owned(objects.local_queue(self.run_id, settings.cluster_queue), self.owner)
        )
        await self.kube.apply(objects.owned(objects.workload(self.run_id, sets), self.owner))
        started = time.monotonic()
        outcome: tuple[str, Obj] | None = None
        with anyio.move_on_after(settings.admission_timeout_s):
            outcome = await self.until(self._admission)
        if outcome is None:
            last = self.workloads.objects.get(objects.WORKLOAD)
            pending = condition(last, "QuotaReserved") or {}
            raise AdmissionRefused(
                f"Kueue did not admit the complete roster within "
                f"{settings.admission_timeout_s:g} s (ClusterQueue {settings.cluster_queue}: "
                f"{pending.get('message') or 'no decision yet'}); nothing was started: raise "
                f"the queue's quota, shrink the roster, or wait longer "
                f"(SOCIETY_ADMISSION_TIMEOUT_S)",
                reason="admission-timeout",
                admission=admission,
            )
        state, workload = outcome
        if state != "admitted":
            raise AdmissionRefused(
                f"the roster's Workload was {state} before Kueue admitted it",
                reason=f"workload-{state}",
                admission=admission,
            )
        status = workload["status"]["admission"]
        assignments = {a["name"]: a for a in status.get("podSetAssignments") or []}
        queue = QueueAdmission(
            workload=objects.WORKLOAD,
            local_queue=objects.LOCAL_QUEUE,
            cluster_queue=status["clusterQueue"],
            pod_sets=[
                PodSetAdmission(
                    name=s.name,
                    count=int(assignments.get(s.name, {}).get("count") or len(s.agents)),
                    agents=list(s.agents),
                    flavors=dict(assignments.get(s.name, {}).get("flavors") or {}),
                )
                for s in sets
            ],
            waited_ms=(time.monotonic() - started) * 1000,
        )
        return dataclasses.replace(admission, queue=queue)

    def _admission(self) -> tuple[str, Obj] | None:
        workload = self.workloads.objects.get(objects.WORKLOAD)
        if workload is None:
            gone = self.workloads.deleted.get(objects.WORKLOAD)
            return ("deleted", gone) if gone is not None else None
        if is_true(workload, "Evicted"):
            return ("evicted", workload)
        if is_true(workload, "Admitted"):
            return ("admitted", workload)
        return None

    async def lost(self) -> PlatformError:
        state, workload = await self.until(self._loss)
        evicted = condition(workload, "Evicted") or {}
        detail = evicted.get("message") or evicted.get("reason") or "no reason given"
        return PlatformError(
            f"Kueue's Workload for the roster was {state} while the run held it ({detail}); "
            f"the run lost its capacity",
            reason=f"workload-{state}",
        )

    def _loss(self) -> tuple[str, Obj] | None:
        state = self._admission()
        if state is None or state[0] == "admitted":
            workload = self.workloads.objects.get(objects.WORKLOAD)
            if workload is not None and not is_true(workload, "Admitted"):
                return ("evicted", workload)  # Kueue withdrew the admission
            return None
        return state

    # ---- sandboxes ---------------------------------------------------------------------------

    async def start(self, launch: AgentLaunch) -> Sandbox:
        agent = launch.name
        settings = self.platform.settings
        credentials = await self._credentials(launch)
        descriptor = await self._advertise_services(launch)
        manifests = [
            objects.agent_secrets(self.run_id, agent, launch.secrets(credentials).to_json())
        ]
        if descriptor.files:
            manifests.append(objects.agent_files(self.run_id, agent, descriptor.files))
        manifests.append(
            objects.sandbox(
                self.run_id,
                agent,
                descriptor,
                router_url=self.agent_router_url,
                seed=self.placement.seed,
                shutdown_at=self._shutdown_at,
            )
        )
        try:
            for manifest in manifests:
                await self.kube.apply(objects.owned(manifest, self.owner))
        except PlatformError as exc:
            raise SandboxStartError(
                f"cannot create the sandbox of {agent}: {exc}", reason="sandbox-create-failed"
            ) from exc
        started: tuple[str, Obj, Obj | None] | None = None
        with anyio.move_on_after(settings.startup_timeout_s):
            started = await self.until(lambda: self._started(agent))
        if started is None:
            raise SandboxStartError(
                f"the Sandbox of {agent} had no Ready, running pod within "
                f"{settings.startup_timeout_s:g} s ({self._describe(agent)}); see kubectl "
                f"describe sandbox {agent} -n {self.run_id}",
                reason="startup-timeout",
            )
        state, sandbox, pod = started
        if state != "ready":
            raise SandboxStartError(
                f"the Sandbox of {agent} {state} before it was ready", reason="exited-before-ready"
            )
        assert pod is not None
        default = (sandbox["status"]["serviceFQDN"], descriptor.bridge_port)
        host, port = await self.platform.bridge_address(self.run_id, agent, default)
        exited: Observation[ProcessExit] = Observation()
        access = SandboxAccess(agent, host, port, launch.bridge_token, exited)
        handle = KubernetesSandbox(agent, access, pod["metadata"]["name"])
        self._sandboxes.append(handle)
        self._tasks.start_soon(self._observe_exit, handle)
        return handle

    async def _credentials(self, launch: AgentLaunch) -> dict[str, str]:
        """The values of the agent's credential references: the controller's environment, or a
        Secret in the credentials namespace read by name (never listed)."""
        values: dict[str, str] = {}
        missing: list[str] = []
        namespace = self.platform.settings.credentials_namespace
        for name, ref in launch.descriptor.credentials.items():
            if ref.secret:
                value, why = await self._secret_value(namespace, ref.secret, ref.key or name)
            else:
                value = os.environ.get(ref.env) if ref.env else None
                why = f"the controller's environment has no {ref.env}"
            if value is None:
                missing.append(f"{name}: {why}")
            else:
                values[name] = value
        if missing:
            raise SandboxStartError(
                f"credentials for {launch.name} are not available to the controller: "
                f"{'; '.join(missing)}",
                reason="credential-missing",
            )
        return values

    async def _secret_value(self, namespace: str, secret: str, key: str) -> tuple[str | None, str]:
        found = self._secrets_read.get(secret)
        if found is None:
            try:
                found = await self.kube.get("Secret", secret, namespace) or {}
            except KubeError as exc:
                if exc.status != 403:
                    raise
                return None, (
                    f"the controller may not read Secret {namespace}/{secret} (is the run's "
                    f"RoleBinding {access.credentials_binding_name(self.run_id)} there? the Role "
                    f"{access.CREDENTIALS_READER} must exist in {namespace})"
                )
            self._secrets_read[secret] = found
        if not found:
            return None, f"Secret {namespace}/{secret} does not exist"
        data = found.get("data") or {}
        if key not in data:
            return None, f"Secret {namespace}/{secret} has no key {key!r}"
        return base64.b64decode(data[key]).decode("utf-8"), ""

    @property
    def agent_router_url(self) -> str:
        scheme = "wss" if self.platform.tls_for(self.run_id) is not None else "ws"
        host = objects.router_host(self.run_id)
        return f"{scheme}://{host}:{_port(self.placement.router_url)}"

    def _live_pods(self, sandbox: Obj) -> list[Obj]:
        selector = _parse_selector(sandbox.get("status", {}).get("selector") or "")
        if not selector:
            return []
        return [
            pod
            for pod in self.pods.objects.values()
            if _matches(pod, selector)
            and not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") in ("Pending", "Running", None)
        ]

    def _started(self, agent: str) -> tuple[str, Obj, Obj | None] | None:
        sandbox = self.sandboxes.objects.get(agent)
        if sandbox is None:
            gone = self.sandboxes.deleted.get(agent)
            return ("vanished", gone, None) if gone is not None else None
        if is_true(sandbox, "Finished"):
            return ("finished", sandbox, None)
        for pod in self.pods.objects.values():
            if pod["metadata"].get("labels", {}).get(objects.AGENT_LABEL) == agent and (
                pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
                or _terminated(pod) is not None  # the keeper container keeps the pod Running
            ):
                return ("exited", sandbox, pod)
        ready = condition(sandbox, "Ready")
        status = sandbox.get("status", {})
        generation = sandbox["metadata"].get("generation")
        if (
            ready is None
            or ready.get("status") != "True"
            or ready.get("observedGeneration", generation) != generation
            or not status.get("serviceFQDN")
            or not status.get("selector")
        ):
            return None
        live = self._live_pods(sandbox)
        if len(live) != 1 or live[0].get("status", {}).get("phase") != "Running":
            return None
        return ("ready", sandbox, live[0])

    def _describe(self, agent: str) -> str:
        sandbox = self.sandboxes.objects.get(agent)
        ready = condition(sandbox, "Ready") or {}
        error = self.sandboxes.error or self.pods.error
        return "; ".join(
            part
            for part in (
                f"Ready={ready.get('status', 'unknown')} {ready.get('message') or ''}".strip(),
                f"watch failing: {error}" if error else "",
            )
            if part
        )

    async def _observe_exit(self, handle: KubernetesSandbox) -> None:
        ended = await self.until(lambda: self._ended(handle))
        handle.access.exit.set(ended)

    def _ended(self, handle: KubernetesSandbox) -> ProcessExit | None:
        pod = self.pods.objects.get(handle.pod)
        if pod is not None:
            terminated = _terminated(pod)
            if terminated is not None:
                return terminated
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return ProcessExit(code=0 if pod["status"]["phase"] == "Succeeded" else 1)
            return None
        gone = self.pods.deleted.get(handle.pod)
        if gone is not None:
            return _terminated(gone) or ProcessExit(signal=signal.SIGKILL)  # vanished
        if handle.name not in self.sandboxes.objects:
            return ProcessExit(signal=signal.SIGKILL)
        return None

    async def stop(self, sandbox: Sandbox, *, grace_s: float) -> ProcessExit:
        assert isinstance(sandbox, KubernetesSandbox)
        exited = sandbox.access.exit
        with anyio.move_on_after(grace_s):
            await exited
        await self._capture_log(sandbox)
        if exited.done:
            return await exited
        await self.kube.delete("Sandbox", sandbox.name, self.run_id)
        with anyio.move_on_after(_DELETE_WAIT_S):
            return await exited
        exited.set(ProcessExit(signal=signal.SIGKILL))
        return await exited

    async def _capture_log(self, sandbox: KubernetesSandbox) -> None:
        if sandbox.log is not None or sandbox.log_detail is not None:
            return
        limit = 4 * 1024 * 1024
        try:
            with anyio.fail_after(_LOG_TIMEOUT_S):
                sandbox.log = await self.kube.log(sandbox.pod, self.run_id, limit_bytes=limit)
        except Exception as exc:
            sandbox.log_detail = f"the pod's log could not be read: {type(exc).__name__}: {exc}"

    async def harvest(self, sandbox: Sandbox, declared: Harvest) -> list[HarvestedItem]:
        assert isinstance(sandbox, KubernetesSandbox)
        limit = declared.max_bytes
        items = []
        for path in declared.files:
            items.append(await self._harvest_file(sandbox, path, limit))
        if declared.logs:
            await self._capture_log(sandbox)
            items.append(await anyio.to_thread.run_sync(self._write_log, sandbox, limit))
        return items

    async def _harvest_file(
        self, sandbox: KubernetesSandbox, path: str, limit: int
    ) -> HarvestedItem:
        """Read one declared file through the exec API, in the pod's keeper container."""

        def item(outcome: HarvestOutcome, **fields: Any) -> HarvestedItem:
            return HarvestedItem(
                kind="workspace", name=path, outcome=outcome, limit_bytes=limit, **fields
            )

        try:
            with anyio.fail_after(_EXEC_TIMEOUT_S):
                result = await self.kube.exec(
                    sandbox.pod,
                    self.run_id,
                    container=objects.KEEPER_CONTAINER,
                    command=["python", "-c", _READ_FILE, objects.WORKDIR, path, str(limit)],
                    limit_bytes=limit,
                )
        except (KubeError, TimeoutError, OSError) as exc:
            return item(
                "unreadable",
                detail=f"the Kubernetes exec API could not read it from pod {sandbox.pod} "
                f"(container {objects.KEEPER_CONTAINER}): {type(exc).__name__}: {exc}",
            )
        code = result.exit_code
        if code == _ABSENT:
            return item("absent")
        if code == _OVERSIZE:
            return item("oversize", size=int(result.stdout.strip() or 0))
        if code != 0 or len(result.stdout) > limit:
            why = result.stderr.decode(errors="replace").strip()[-300:] or "no message"
            return item("unreadable", detail=f"the reader in the pod exited {code}: {why}")
        return await anyio.to_thread.run_sync(self._write_file, sandbox, path, result.stdout, limit)

    def _write_file(
        self, sandbox: KubernetesSandbox, path: str, data: bytes, limit: int
    ) -> HarvestedItem:
        relative = Path("artifacts") / sandbox.name / "workspace" / path
        target = self.placement.run_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return HarvestedItem(
            kind="workspace",
            name=path,
            outcome="harvested",
            limit_bytes=limit,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            artifact=str(relative),
        )

    def _write_log(self, sandbox: KubernetesSandbox, limit: int) -> HarvestedItem:
        name = "output.log"
        if sandbox.log is None:
            return HarvestedItem(
                kind="log", name=name, outcome="unreadable", limit_bytes=limit,
                detail=sandbox.log_detail,
            )  # fmt: skip
        if len(sandbox.log) > limit:
            return HarvestedItem(
                kind="log", name=name, outcome="oversize", limit_bytes=limit,
                size=len(sandbox.log),
            )  # fmt: skip
        relative = Path("artifacts") / sandbox.name / "logs" / name
        target = self.placement.run_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(sandbox.log)
        return HarvestedItem(
            kind="log",
            name=name,
            outcome="harvested",
            limit_bytes=limit,
            sha256=hashlib.sha256(sandbox.log).hexdigest(),
            size=len(sandbox.log),
            artifact=str(relative),
        )

    async def teardown(self) -> None:
        """Release the queue's capacity and the sandboxes (the namespace goes after)."""
        for name in list(self.sandboxes.objects):
            await self.kube.delete("Sandbox", name, self.run_id)
        await self.kube.delete("Workload", objects.WORKLOAD, self.run_id)


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def _parse_selector(selector: str) -> dict[str, str]:
    pairs = (part.split("=", 1) for part in selector.split(",") if "=" in part)
    return {key.strip(): value.strip() for key, value in pairs}


def _matches(obj: Obj, selector: dict[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _terminated(pod: Obj) -> ProcessExit | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") != objects.AGENT_CONTAINER:
            continue
        state: dict[str, Any] = (status.get("state") or {}).get("terminated") or {}
        if not state:
            return None
        if state.get("signal"):
            return ProcessExit(signal=int(state["signal"]))
        code = int(state.get("exitCode") or 0)
        if code > 128 and code - 128 in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            return ProcessExit(signal=code - 128)  # the container runtime's 128 + n
        return ProcessExit(code=code)
    return None
