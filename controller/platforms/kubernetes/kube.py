"""A small typed seam over the official asyncio client (``kubernetes.aio``): objects are dicts.

Writes are server-side apply (one field manager, forced), or a plain create where a role grants
``create`` only and for an agent's new objects (``create_or_apply``); reads are gets and
list-then-watch.
Only the kinds a run uses are known (``KINDS``); paths are built from that table, so one
``apply`` serves every manifest ``objects`` builds. The kinds, ``KubeError`` and conditions
live in ``api``, the informer in ``informer``; both are importable from here too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import aiohttp
import anyio

from controller.platforms.kubernetes.api import (
    KINDS,
    KUEUE,
    SANDBOX_GROUP,
    KubeError,
    Obj,
    condition,
    is_true,
)
from controller.platforms.kubernetes.informer import Informer

if TYPE_CHECKING:
    from controller.platforms.kubernetes.settings import KubernetesSettings

__all__ = [
    "FIELD_MANAGER",
    "KINDS",
    "KUEUE",
    "SANDBOX_GROUP",
    "ExecResult",
    "Informer",
    "Kube",
    "KubeError",
    "Obj",
    "condition",
    "is_true",
]

FIELD_MANAGER = "society-runner"
IN_CLUSTER_REACH_S = 60.0
"""How long an in-cluster client waits for its pod's first route to the API server."""
CONNECT_RETRY_S = 30.0
"""How long a request retries a connection the API server's address refused or could not
route. Such a request never reached the server, so resending it is safe for any verb; the
window covers a restart of the API server's pod and an enforcer rewriting its rules."""


async def at_once(*calls: Callable[[], Coroutine[Any, Any, Any]]) -> list[Any]:
    """Await ``calls`` concurrently (independent requests: one round trip's wait, not one each);
    their results in order. The first error is raised as it is, not in a group, once the others
    ended."""
    results: list[Any] = [None] * len(calls)

    async def run(index: int) -> None:
        results[index] = await calls[index]()

    try:
        async with anyio.create_task_group() as tasks:
            for index in range(len(calls)):
                tasks.start_soon(run, index)
    except* Exception as group:
        raise group.exceptions[0] from None
    return results


class Kube:
    """An API server connection: ``async with Kube.connect(kubeconfig=..., context=...)``."""

    def __init__(
        self,
        api: Any,
        *,
        field_manager: str = FIELD_MANAGER,
        connect_retry_s: float = CONNECT_RETRY_S,
    ) -> None:
        self.api = api
        self.field_manager = field_manager
        self.connect_retry_s = connect_retry_s

    @classmethod
    def of(
        cls,
        settings: KubernetesSettings,
        *,
        as_controller: bool = True,
        connect_retry_s: float = CONNECT_RETRY_S,
    ) -> AbstractAsyncContextManager[Kube]:
        """``connect`` as ``settings`` say: in-cluster or their kubeconfig and context, acting as
        their ``impersonate`` user unless ``as_controller`` is false (a check that reads
        cluster-scoped objects the controller's identity is not granted)."""
        return cls.connect(
            kubeconfig=settings.kubeconfig,
            context=settings.context,
            in_cluster=settings.in_cluster,
            impersonate=settings.impersonate if as_controller else None,
            connect_retry_s=connect_retry_s,
        )

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        impersonate: str | None = None,
        connect_retry_s: float = CONNECT_RETRY_S,
    ) -> AsyncIterator[Kube]:
        """In-cluster (the pod's ServiceAccount) or from a kubeconfig; ``impersonate`` a user;
        a refused connection is resent for ``connect_retry_s`` (``CONNECT_RETRY_S``)."""
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
            kube = cls(api, connect_retry_s=connect_retry_s)
            if in_cluster:
                await kube.until_reachable()
            yield kube
        finally:
            with anyio.CancelScope(shield=True):
                await api.close()  # type: ignore[no-untyped-call]

    async def until_reachable(self, limit_s: float = IN_CLUSTER_REACH_S) -> None:
        """Until the API server answers ``/version``. A new pod's network may lag its start: a
        NetworkPolicy enforcer (kube-router, kindnet's) admits its egress once it has seen the
        pod, which under load takes seconds. ``KubeError`` names the server after ``limit_s``."""
        host = self.api.configuration.host
        await _with_backoff(
            lambda: self._request("GET", "/version", request_timeout=10.0, connect_retry_s=0),
            retry=lambda exc: isinstance(exc, (OSError, aiohttp.ClientError, TimeoutError)),
            limit_s=limit_s,
            gave_up=lambda exc: KubeError(
                f"the API server at {host} did not answer for {limit_s:.0f} s ({exc}); "
                "check that the pod's egress to it is allowed (NetworkPolicy) and that the "
                "cluster is up",
                status=0,
                reason="api-server-unreachable",
            ),
        )

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
        connect_retry_s: float | None = None,
    ) -> Any:
        """One request; a connection refused or unroutable is resent for ``connect_retry_s``
        (``None``: the client's ``connect_retry_s``; 0: raised at once)."""
        method_, url, headers, body_, _ = await self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = await self._send(
            method_,
            url,
            headers,
            body_,
            request_timeout=request_timeout,
            stream=stream,
            retry_s=self.connect_retry_s if connect_retry_s is None else connect_retry_s,
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

    async def _send(
        self,
        method: str,
        url: str,
        headers: Any,
        body: Any,
        *,
        request_timeout: float | None,
        stream: bool,
        retry_s: float,
    ) -> Any:
        """``call_api``, resending while the connection itself fails (refused, no route) for up
        to ``retry_s``; a TLS failure or an answer of any status is never resent."""

        def send() -> Any:
            return self.api.call_api(
                method, url, headers, body, _request_timeout=request_timeout,
                _preload_content=not stream,
            )  # fmt: skip

        if retry_s <= 0:
            return await send()
        return await _with_backoff(
            send,
            retry=lambda exc: (
                isinstance(exc, aiohttp.ClientConnectorError)
                and not isinstance(exc, aiohttp.ClientSSLError)
            ),
            limit_s=retry_s,
            gave_up=lambda exc: KubeError(
                f"the API server at {self.api.configuration.host} refused or could not route "
                f"connections for {retry_s:.0f} s ({exc}); check that the cluster is up and "
                "this client's route to it",
                status=0,
                reason="api-server-unreachable",
            ),
        )

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

    async def create(self, obj: Obj) -> Obj:
        """Create ``obj`` (a plain POST, for rights that grant ``create`` without ``patch``);
        raises ``KubeError`` with status 409 when it exists."""
        meta = obj["metadata"]
        path = KINDS[obj["kind"]].path(meta.get("namespace"))
        result: Obj = await self._request("POST", path, body=obj)
        return result

    async def create_or_apply(self, obj: Obj) -> Obj:
        """Create ``obj``, or apply it when it exists (a retried start). For a new object a
        create is the cheaper request: the API server neither merges managed fields nor
        converts the object through its schema: one at a time here, a create of an agent's
        Secret or Sandbox took 0.65x the time of an apply of it (medians, 100 each)."""
        try:
            return await self.create(obj)
        except KubeError as exc:
            if exc.status != 409:
                raise
        return await self.apply(obj)

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

    async def log(self, pod: str, namespace: str, *, container: str, limit_bytes: int) -> bytes:
        """The log of ``container`` in ``pod`` (a pod with more than one container needs the
        name), at most ``limit_bytes + 1`` bytes (so an oversize log shows as such)."""
        response = await self._request(
            "GET",
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/log",
            query={"container": container, "limitBytes": str(limit_bytes + 1)},
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


async def _with_backoff(
    attempt: Callable[[], Awaitable[Any]],
    *,
    retry: Callable[[Exception], bool],
    limit_s: float,
    gave_up: Callable[[Exception], KubeError],
) -> Any:
    """``attempt()`` again after each exception ``retry`` accepts (0.2 s doubling to 2 s) until
    ``limit_s`` has passed, then ``gave_up(exc)`` is raised; any other exception at once."""
    deadline = anyio.current_time() + limit_s
    delay = 0.2
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not retry(exc):
                raise
            if anyio.current_time() + delay > deadline:
                raise gave_up(exc) from None
        await anyio.sleep(delay)
        delay = min(delay * 2, 2.0)
