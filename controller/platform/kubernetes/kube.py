"""A small typed seam over the official asyncio client (``kubernetes.aio``): objects are dicts.

Writes are server-side apply (one field manager, forced), reads are gets and list-then-watch.
Only the kinds a run uses are known (``KINDS``); paths are built from that table, so one
``apply`` serves every manifest ``objects`` builds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import anyio

from controller.run.platform import PlatformError

FIELD_MANAGER = "society-runner"
T = TypeVar("T")
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        return base + (f"/{quote(name)}" if name else "")


KUEUE = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
SANDBOX_GROUP = "agents.x-k8s.io"
SANDBOX_VERSION = "v1beta1"  # what Agent Sandbox v0.5.0 serves and stores

KINDS: dict[str, Kind] = {
    "Namespace": Kind("", "v1", "namespaces", namespaced=False),
    "ConfigMap": Kind("", "v1", "configmaps"),
    "Secret": Kind("", "v1", "secrets"),
    "Service": Kind("", "v1", "services"),
    "ServiceAccount": Kind("", "v1", "serviceaccounts"),
    "Pod": Kind("", "v1", "pods"),
    "NetworkPolicy": Kind("networking.k8s.io", "v1", "networkpolicies"),
    "Role": Kind("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Kind("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "ClusterRole": Kind("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Kind(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False
    ),
    "Job": Kind("batch", "v1", "jobs"),
    "PersistentVolumeClaim": Kind("", "v1", "persistentvolumeclaims"),
    "Deployment": Kind("apps", "v1", "deployments"),
    "LocalQueue": Kind(KUEUE, KUEUE_VERSION, "localqueues"),
    "Workload": Kind(KUEUE, KUEUE_VERSION, "workloads"),
    "ClusterQueue": Kind(KUEUE, KUEUE_VERSION, "clusterqueues", namespaced=False),
    "ResourceFlavor": Kind(KUEUE, KUEUE_VERSION, "resourceflavors", namespaced=False),
    "Sandbox": Kind(SANDBOX_GROUP, SANDBOX_VERSION, "sandboxes"),
}


class KubeError(PlatformError):
    """The API server refused or failed a request; ``status`` is its HTTP status."""

    def __init__(self, detail: str, *, status: int, reason: str = "kubernetes-api") -> None:
        super().__init__(detail, reason=reason)
        self.status = status


class Kube:
    """An API server connection: ``async with Kube.connect(kubeconfig=..., context=...)``."""

    def __init__(self, api: Any, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api = api
        self.field_manager = field_manager

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        impersonate: str | None = None,
    ) -> AsyncIterator[Kube]:
        """In-cluster (the pod's ServiceAccount) or from a kubeconfig; ``impersonate`` a user."""
        from kubernetes.aio import client, config

        configuration = client.Configuration()
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        api = client.ApiClient(configuration)
        if impersonate:
            api.set_default_header("Impersonate-User", impersonate)  # type: ignore[no-untyped-call]
        try:
            yield cls(api)
        finally:
            with anyio.CancelScope(shield=True):
                await api.close()  # type: ignore[no-untyped-call]

    # ---- requests -------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = 60.0,
        stream: bool = False,
    ) -> Any:
        method_, url, headers, body_, _ = await self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = await self.api.call_api(
            method_,
            url,
            headers,
            body_,
            _request_timeout=request_timeout,
            _preload_content=not stream,
        )
        if stream:
            if response.status >= 400:
                data = await response.read()
                response.response.release()
                raise _error(method, path, response.status, data)
            return response
        data = await response.read()
        if response.status >= 400:
            raise _error(method, path, response.status, data)
        return json.loads(data) if data else None

    async def apply(self, obj: Obj) -> Obj:
        """Server-side apply ``obj`` (forced, as this field manager); returns the live object."""
        kind = KINDS[obj["kind"]]
        meta = obj["metadata"]
        path = kind.path(meta.get("namespace"), meta["name"])
        query = {"fieldManager": self.field_manager, "force": "true"}
        result: Obj = await self._request(
            "PATCH", path, query=query, body=obj, content_type="application/apply-patch+yaml"
        )
        return result

    async def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or ``None`` when it does not exist."""
        try:
            result: Obj = await self._request("GET", KINDS[kind].path(namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        grace_s: int | None = None,
    ) -> bool:
        """Delete; ``False`` when it was already gone."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        try:
            await self._request("DELETE", KINDS[kind].path(namespace, name), body=body)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def list(
        self, kind: str, namespace: str | None = None, *, label_selector: str | None = None
    ) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion (to watch from)."""
        query = {"labelSelector": label_selector} if label_selector else {}
        result = await self._request("GET", KINDS[kind].path(namespace), query=query)
        return list(result.get("items") or []), str(result["metadata"].get("resourceVersion", ""))

    async def log(self, pod: str, namespace: str, *, limit_bytes: int) -> bytes:
        response = await self._request(
            "GET",
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/log",
            query={"limitBytes": str(limit_bytes + 1)},
            stream=True,
        )
        try:
            data: bytes = await response.read()
        finally:
            response.response.release()
        return data

    async def exec(
        self,
        pod: str,
        namespace: str,
        *,
        container: str,
        command: Sequence[str],
        limit_bytes: int,
        timeout_s: float = 30.0,
    ) -> ExecResult:
        """Run ``command`` in a running container (the exec subresource, websocket channel
        protocol v4); stdout is kept up to ``limit_bytes + 1``. Raises ``KubeError`` when the
        API server or the kubelet refuses the exec (no running container, no exec support)."""
        from aiohttp import WSMsgType, WSServerHandshakeError
        from kubernetes.aio.stream import WsApiClient

        query = [("container", container), ("stdout", "true"), ("stderr", "true")]
        query += [("command", part) for part in command]
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/exec?{urlencode(query)}"
        ws_api = WsApiClient(configuration=self.api.configuration)  # type: ignore[no-untyped-call]
        ws_api.default_headers.update(self.api.default_headers)
        stdout, stderr, status = bytearray(), bytearray(), b""
        try:
            method, url, headers, _, _ = await ws_api.param_serialize(
                "GET", path, header_params={}, auth_settings=["BearerToken"]
            )
            with anyio.fail_after(timeout_s):
                response = await ws_api.call_api(  # type: ignore[no-untyped-call]
                    method, url, headers, _preload_content=False
                )
                async with response.response as ws:
                    async for message in ws:
                        if message.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                            continue
                        data = (
                            message.data
                            if isinstance(message.data, bytes)
                            else (message.data.encode())
                        )
                        channel, body = data[:1], data[1:]
                        if channel == b"\x01" and len(stdout) <= limit_bytes:
                            stdout += body[: limit_bytes + 1 - len(stdout)]
                        elif channel == b"\x02":
                            stderr += body[:4096]
                        elif channel == b"\x03":
                            status += body
        except WSServerHandshakeError as exc:
            raise KubeError(
                f"exec in {namespace}/{pod}: {exc.status} {exc.message}", status=exc.status
            ) from None
        finally:
            await ws_api.close()  # type: ignore[no-untyped-call]
        return ExecResult(bytes(stdout), bytes(stderr), _exit_code(status))

    async def watch(
        self,
        kind: str,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_s: int = 60,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, object)`` events from ``resource_version`` until the server ends the watch."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        response = await self._request(
            "GET",
            KINDS[kind].path(namespace),
            query=query,
            request_timeout=timeout_s + 10,
            stream=True,
        )
        try:
            content = response.response.content
            while line := await content.readline():
                event = json.loads(line)
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise KubeError(
                        f"watch of {kind} failed: {status.get('message')}",
                        status=int(status.get("code") or 500),
                    )
                yield event["type"], event["object"]
        finally:
            response.response.release()


@dataclass(frozen=True, slots=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    """``None`` when the API server sent no status (the stream broke)."""


def _exit_code(status: bytes) -> int | None:
    if not status:
        return None
    body = json.loads(status)
    if body.get("status") == "Success":
        return 0
    for cause in (body.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message") or 1)
    return None


def _error(method: str, path: str, status: int, data: bytes) -> KubeError:
    try:
        message = json.loads(data).get("message") or data.decode(errors="replace")
    except ValueError:
        message = data.decode(errors="replace")
    return KubeError(f"{method} {path}: {status} {message}", status=status)


class Informer:
    """The latest copy of each object of one kind in a namespace, kept by list-then-watch.

    ``run()`` keeps it current (relisting after an expired watch); ``until(check)`` waits,
    level-triggered, until ``check(objects)`` returns something other than ``None``.
    """

    def __init__(
        self,
        kube: Kube,
        kind: str,
        namespace: str,
        *,
        label_selector: str | None = None,
        notify: Callable[[], None] | None = None,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.notify = notify
        self.objects: dict[str, Obj] = {}
        self.deleted: dict[str, Obj] = {}
        """The last copy of objects seen deleted, by name."""
        self.synced = anyio.Event()
        self.error: BaseException | None = None
        self._changed = anyio.Event()

    async def run(self) -> None:
        """Keep the cache current; API errors are retried (a watch is level-triggered)."""
        while True:
            try:
                await self._sync()
            except Exception as exc:  # the API server's refusal or a dropped connection
                self.error = exc
                await anyio.sleep(1.0)

    async def _sync(self) -> None:
        while True:
            items, version = await self.kube.list(
                self.kind, self.namespace, label_selector=self.label_selector
            )
            seen = {item["metadata"]["name"]: item for item in items}
            for name in set(self.objects) - set(seen):
                self.deleted[name] = self.objects[name]
            self.objects = seen
            self.synced.set()
            self._notify()
            try:
                while True:
                    async for kind, obj in self.kube.watch(
                        self.kind,
                        self.namespace,
                        resource_version=version,
                        label_selector=self.label_selector,
                    ):
                        version = obj.get("metadata", {}).get("resourceVersion") or version
                        if kind == "BOOKMARK":
                            continue
                        name = obj["metadata"]["name"]
                        if kind == "DELETED":
                            self.objects.pop(name, None)
                            self.deleted[name] = obj
                        else:
                            self.objects[name] = obj
                            self.deleted.pop(name, None)
                        self._notify()
            except KubeError as exc:
                if exc.status != 410:  # 410 Gone: the version expired; relist
                    raise

    def _notify(self) -> None:
        self.error = None
        self._changed.set()
        self._changed = anyio.Event()
        if self.notify is not None:
            self.notify()

    async def until(self, check: Callable[[Informer], T | None]) -> T:
        """Wait until ``check(self)`` is not ``None``; re-evaluated after every change."""
        await self.synced.wait()
        while True:
            changed = self._changed
            result = check(self)
            if result is not None:
                return result
            await changed.wait()


def condition(obj: Obj | None, kind: str) -> Obj | None:
    """The status condition of type ``kind``, if present."""
    if obj is None:
        return None
    for item in obj.get("status", {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"
