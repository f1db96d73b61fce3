"""Secrets on the cluster: credential references resolved by the controller's own identity, and
no token or credential value in any object but the agents' Secrets (nor in the ledger).

Runs against the real-pod tests' kind cluster; the agents' pods run on its agents' node.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import base64
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    SCRIPTED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from k8s_run_support import echo, hear_everyone
from kind_plane import KindPlane

from controller import Run, RunSpec
from controller.agents import SecretRef, scripted
from controller.events.run import AgentRuntimeStartFailed, ReadinessGateFailed
from controller.platforms.kubernetes import Kube, delete_run_namespace
from controller.platforms.kubernetes.kube import KINDS, KubeError
from controller.platforms.kubernetes.namespace import prepare_run_namespace
from controller.platforms.kubernetes.rbac import (
    controller_subject,
    credentials_binding_name,
    credentials_reader_role,
)
from controller.run import PlatformLost, ProgramFinished, RunContext, Success
from controller.run.runid import new_run_id
from ledger import open_ledger_artifacts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENV_CREDENTIAL = "SR_TEST_TOOL_TOKEN"


@pytest.fixture
async def credentials_namespace(control_plane: KindPlane) -> AsyncIterator[tuple[str, str]]:
    """A credentials namespace with the reader Role (the chart installs it) and one Secret whose
    ``tool-key`` holds a fresh value; yields ``(namespace, value)``."""
    name = f"creds-{uuid.uuid4().hex[:10]}"
    value = f"secret-value-{secrets.token_hex(16)}"
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        await kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        await kube.apply(credentials_reader_role(name))
        await kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "tool-keys", "namespace": name},
                "data": {"tool-key": base64.b64encode(value.encode()).decode()},
            }
        )
        try:
            yield name, value
        finally:
            await kube.delete("Namespace", name)


async def forbidden(call: Any) -> bool:
    try:
        await call
    except KubeError as exc:
        return exc.status == 403
    return False


async def object_dumps(kube: Kube, run_id: str) -> tuple[str, list[dict[str, Any]]]:
    """Every object of the run's namespace but Secrets, as JSON text; and the agents' boot
    secrets files (decoded from their Secrets)."""
    texts = [json.dumps(await kube.get("Namespace", run_id))]
    for kind, spec in KINDS.items():
        if not spec.namespaced or kind == "Secret":
            continue
        items, _ = await kube.list(kind, run_id)
        texts += [json.dumps(item) for item in items]
    secret_items, _ = await kube.list("Secret", run_id)
    files = [
        json.loads(base64.b64decode(item["data"]["secrets.json"]))
        for item in secret_items
        if item["metadata"]["name"].endswith("-secrets")
    ]
    return "\n".join(texts), files


async def test_secret_references_reach_only_the_agents_secrets_and_no_token_is_in_any_spec(
    control_plane: KindPlane,
    cluster_queue: str,
    credentials_namespace: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace, secret_value = credentials_namespace
    env_value = f"env-value-{secrets.token_hex(16)}"
    monkeypatch.setenv(ENV_CREDENTIAL, env_value)
    monkeypatch.setenv("SOCIETY_CREDENTIALS", ENV_CREDENTIAL)  # the operator allows it
    credentials = {
        "TOOL_KEY": SecretRef(secret="tool-keys", key="tool-key"),
        "ENV_TOKEN": SecretRef(env=ENV_CREDENTIAL),
    }
    run_id = new_run_id()
    subject = controller_subject(run_id)
    kubeconfig = str(control_plane.kubeconfig)
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> list[str]:
        heard = await hear_everyone(ctx)
        async with Kube.connect(kubeconfig=kubeconfig) as admin:
            seen["objects"], seen["files"] = await object_dumps(admin, run_id)
            seen["binding"] = await admin.get(
                "RoleBinding", credentials_binding_name(run_id), namespace
            )
        async with Kube.connect(kubeconfig=kubeconfig, impersonate=subject) as controller:
            seen["denied"] = {
                "list the credentials": await forbidden(controller.list("Secret", namespace)),
                "read a Secret elsewhere": await forbidden(
                    controller.get("Secret", "kueue-webhook-server-cert", "kueue-system")
                ),
            }
        return heard

    spec = RunSpec.define(
        id="acme.k8s-credentials/v1",
        agents={
            name: scripted(echo, image=SCRIPTED, credentials=credentials)
            for name in ("alice", "bob")
        },
        execute=execute,
    )
    root = artifacts(tmp_path)
    async with Kube.connect(kubeconfig=kubeconfig) as admin:
        await prepare_run_namespace(admin, run_id, credentials_namespace=namespace)  # the worker
        try:
            async with on_cluster(
                control_plane,
                run_id,
                cluster_queue=cluster_queue,
                impersonate=subject,  # the controller resolves references as itself
                prepare_namespace=False,
                delete_namespace=False,
                credentials_namespace=namespace,
            ) as (platform, _kube, _record):
                outcome = await Run.execute(
                    spec, platform=platform, run_id=run_id, artifact_root=root
                )
        finally:
            await delete_run_namespace(admin, run_id, credentials_namespace=namespace)
        binding_left = await admin.get("RoleBinding", credentials_binding_name(run_id), namespace)
        left = await left_in_cluster(admin, run_id)

    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert seen["binding"] is not None and binding_left is None and left == []
    assert seen["denied"] == {"list the credentials": True, "read a Secret elsewhere": True}
    files = seen["files"]
    assert len(files) == 2
    expected = {"TOOL_KEY": secret_value, "ENV_TOKEN": env_value}
    assert all(f["credentials"] == expected for f in files)
    values = [secret_value, env_value]
    values += [f[key] for f in files for key in ("routerToken", "bridgeToken")]
    ledger_bytes = b"".join(
        path.read_bytes() for path in (root / run_id).rglob("*") if path.is_file()
    )
    for value in values:
        encoded = base64.b64encode(value.encode()).decode()
        assert value not in seen["objects"] and encoded not in seen["objects"]
        assert value.encode() not in ledger_bytes and encoded.encode() not in ledger_bytes


async def test_a_missing_secret_reference_fails_the_start_before_any_sandbox_with_the_reason(
    control_plane: KindPlane,
    cluster_queue: str,
    credentials_namespace: tuple[str, str],
    tmp_path: Path,
) -> None:
    namespace, _ = credentials_namespace

    async def execute(ctx: RunContext) -> None:
        raise AssertionError("execute must not run")

    broken = {"TOOL_KEY": SecretRef(secret="no-such-secret", key="tool-key")}
    spec = RunSpec.define(
        id="acme.k8s-credentials/v1",
        agents={
            "alice": scripted(echo, image=SCRIPTED),
            "bob": scripted(echo, image=SCRIPTED, credentials=broken),
        },
        execute=execute,
    )
    run_id = new_run_id()
    async with on_cluster(
        control_plane, run_id, cluster_queue=cluster_queue, credentials_namespace=namespace
    ) as (platform, kube, record):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path)
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, PlatformLost), outcome
    assert outcome.cause.reason == "readiness-gate-failed"
    ledger = open_ledger_artifacts(spec.catalog, outcome.receipt.ledger_dir)
    failed = [e for e in ledger.events(AgentRuntimeStartFailed)]
    assert [(e.agent, e.reason) for e in failed] == [("bob", "credential-missing")]
    assert f"Secret {namespace}/no-such-secret does not exist" in failed[0].detail
    assert next(iter(ledger.events(ReadinessGateFailed))).failed[0] == "bob"
    assert "bob" not in {name for _, kind, name in record.seen if kind == "sandbox"}
    assert left == []
