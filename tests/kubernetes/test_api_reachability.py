"""An in-cluster client waits for its pod's first route to the API server (a NetworkPolicy
enforcer admits a new pod's egress only once it has seen the pod), and names the server when it
never answers. Every request rides out a refused connection (the API server's pod restarting)
and resends only what never reached the server. A real HTTP server on loopback stands in for
the API server; no control plane."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import pytest
from aiohttp import web

from controller.platforms.kubernetes.api import KubeError
from controller.platforms.kubernetes.kube import Kube

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


async def test_the_first_request_waits_until_the_api_server_answers(tmp_path: Path) -> None:
    port = _free_port()

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"gitVersion": "v1.36.3"})

    app = web.Application()
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()

    async def listen_later() -> None:
        await anyio.sleep(1.5)  # the route appears a moment after the pod started
        await web.TCPSite(runner, "127.0.0.1", port).start()

    try:
        async with Kube.connect(kubeconfig=str(_kubeconfig(tmp_path, port))) as kube:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(listen_later)
                started = anyio.current_time()
                await kube.until_reachable(limit_s=20)
            assert anyio.current_time() - started >= 1.4
    finally:
        await runner.cleanup()


async def test_an_api_server_that_never_answers_is_named_with_the_next_step(
    tmp_path: Path,
) -> None:
    port = _free_port()
    async with Kube.connect(kubeconfig=str(_kubeconfig(tmp_path, port))) as kube:
        with pytest.raises(KubeError) as raised:
            await kube.until_reachable(limit_s=1)
    assert raised.value.reason == "api-server-unreachable"
    assert f"127.0.0.1:{port} did not answer for 1 s" in str(raised.value)
    assert "NetworkPolicy" in str(raised.value)


async def test_a_request_rides_out_an_api_server_that_refuses_connections_for_a_while(
    tmp_path: Path,
) -> None:
    """A create sent while the API server restarts: its connection is refused, so it never
    reached the server, and it is resent once the server listens again."""
    port = _free_port()
    created: list[dict[str, object]] = []

    async def create(request: web.Request) -> web.Response:
        created.append(await request.json())
        return web.json_response(created[-1], status=201)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/run/configmaps", create)
    runner = web.AppRunner(app)
    await runner.setup()

    async def listen_later() -> None:
        await anyio.sleep(1.5)
        await web.TCPSite(runner, "127.0.0.1", port).start()

    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "seen", "namespace": "run"},
    }
    try:
        async with Kube.connect(kubeconfig=str(_kubeconfig(tmp_path, port))) as kube:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(listen_later)
                started = anyio.current_time()
                answer = await kube.create(config_map)
            assert anyio.current_time() - started >= 1.4
    finally:
        await runner.cleanup()
    assert answer["metadata"] == config_map["metadata"] and len(created) == 1


async def test_a_request_the_api_server_answered_is_never_resent(tmp_path: Path) -> None:
    port = _free_port()
    seen: list[str] = []

    async def unavailable(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.json_response({"kind": "Status", "message": "etcd is slow"}, status=503)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/run/configmaps", unavailable)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with Kube.connect(kubeconfig=str(_kubeconfig(tmp_path, port))) as kube:
            with pytest.raises(KubeError) as raised:
                await kube.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "x", "namespace": "run"},
                    }
                )
    finally:
        await runner.cleanup()
    assert raised.value.status == 503 and seen == ["POST"]


async def test_an_api_server_refusing_past_the_window_is_named_with_the_next_step(
    tmp_path: Path,
) -> None:
    port = _free_port()
    async with Kube.connect(
        kubeconfig=str(_kubeconfig(tmp_path, port)), connect_retry_s=1.0
    ) as kube:
        started = anyio.current_time()
        with pytest.raises(KubeError) as raised:
            await kube.get("Namespace", "default")
        waited = anyio.current_time() - started
    assert raised.value.reason == "api-server-unreachable" and 0.5 <= waited < 5
    assert f"127.0.0.1:{port} refused or could not route connections for 1 s" in str(raised.value)
    assert "check that the cluster is up" in str(raised.value)
