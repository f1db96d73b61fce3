"""Add-ons run out of cluster against the test control plane: Kueue and Agent Sandbox.

Each installs its CRDs and webhooks with loopback URLs and the shared webhook certificate.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cp_build import ControlPlaneError, load_yaml_documents
from cp_certificates import b64
from cp_processes import http_ok, wait_until

if TYPE_CHECKING:
    from controlplane import ControlPlane

KUEUE_NAMESPACE = "kueue-system"
KUEUE_WEBHOOK_SERVICE = "kueue-webhook-service"
KUEUE_WEBHOOK_SECRET = "kueue-webhook-server-cert"
KUEUE_CA_NAME = "kueue-ca"  # Kueue's cert rotator only keeps a CA whose SAN is this name.
SANDBOX_WORKERS = 16
"""Sandboxes the Agent Sandbox controller reconciles at once. With its default (100,
unthrottled) a 1,000-agent roster's creates timed out (60 s) on a loaded 2-core machine."""
# The names the webhook serving certificate is valid for (besides localhost).
WEBHOOK_DNS_NAMES = (f"{KUEUE_WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc",)
_FIELD_PATH = re.compile(r"webhooks\.\[name=(?P<webhook>[^\]]+)\]\.(?P<field>\w+)")


def _raw(response: Any) -> dict[str, Any]:
    """The JSON body of a `_preload_content=False` call; reading it frees the connection."""
    result: dict[str, Any] = json.loads(response.data)
    return result


def _ensure_namespace_with_secret(
    cp: ControlPlane, namespace: str, secret: str, data: Mapping[str, bytes]
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(cp.api_client())
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": secret},
            "type": "Opaque",
            "data": {key: b64(value) for key, value in data.items()},
        },
    )


def _install_crds(cp: ControlPlane, crds: list[dict[str, Any]]) -> None:
    from kubernetes import client

    api = client.ApiextensionsV1Api(cp.api_client())
    for crd in crds:
        _raw(api.create_custom_resource_definition(crd, _preload_content=False))

    def established() -> bool:
        for crd in crds:
            current = _raw(
                api.read_custom_resource_definition(crd["metadata"]["name"], _preload_content=False)
            )
            conditions = current.get("status", {}).get("conditions", [])
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until(f"{len(crds)} CRD(s) Established", established, 60)


def _conversion(cp: ControlPlane, port: int) -> dict[str, Any]:
    return {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}/convert",
                "caBundle": b64(cp.pki.webhook_ca.cert_pem),
            },
        },
    }


def start_kueue(cp: ControlPlane) -> None:
    """Kueue's CRDs and webhooks, then the Kueue manager, waiting until it is ready."""
    processes, pki = cp.processes, cp.pki
    kueue_dir = cp.manifest_dir / "kueue"
    webhook_port, health_port, metrics_port = (
        processes.port("kueue-webhook"),
        processes.port("kueue-health"),
        processes.port("kueue-metrics"),
    )
    # Kueue's rotator keeps a valid pre-seeded secret and only injects its CA
    # into the webhooks: the url clientConfigs written below stay as they are.
    _ensure_namespace_with_secret(
        cp,
        KUEUE_NAMESPACE,
        KUEUE_WEBHOOK_SECRET,
        {
            "ca.crt": pki.webhook_ca.cert_pem,
            "ca.key": pki.webhook_ca.key_pem,
            "tls.crt": pki.webhook.cert_pem,
            "tls.key": pki.webhook.key_pem,
        },
    )
    converted = {
        (doc["metadata"]["name"])
        for patch in (kueue_dir / "crd-conversion-patches" / "enabled.txt").read_text().split()
        for doc in load_yaml_documents(kueue_dir / "crd-conversion-patches" / patch)
    }
    crds = [
        crd
        for path in sorted((kueue_dir / "crds").glob("*.yaml"))
        for crd in load_yaml_documents(path)
    ]
    for crd in crds:
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = _conversion(cp, webhook_port)
    _install_crds(cp, crds)
    _install_kueue_webhooks(cp, webhook_port)
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {
            "host": "127.0.0.1",
            "port": webhook_port,
            "certDir": str(processes.path("kueue-certs")),
        },
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": KUEUE_WEBHOOK_SERVICE,
            "webhookSecretName": KUEUE_WEBHOOK_SECRET,
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(cp.kueue_frameworks)},
    }
    # In a cluster the kubelet mounts the secret here; the rotator waits for the files.
    cert_dir = processes.path("kueue-certs")
    cert_dir.mkdir()
    (cert_dir / "ca.crt").write_bytes(pki.webhook_ca.cert_pem)
    (cert_dir / "tls.crt").write_bytes(pki.webhook.cert_pem)
    (cert_dir / "tls.key").write_bytes(pki.webhook.key_pem)
    config_path = processes.path("kueue.yaml")
    config_path.write_text(json.dumps(config, indent=2))
    kueue = processes.spawn(
        "kueue",
        [
            cp.build.binary("kueue"),
            f"--config={config_path}",
            "--zap-log-level=2",
            # The visibility API would need an APIService routed to 127.0.0.1.
            "--feature-gates=VisibilityOnDemand=false",
        ],
    )
    wait_until(
        "kueue /readyz",
        lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"),
        cp.startup_timeout,
        kueue,
    )


def _install_kueue_webhooks(cp: ControlPlane, port: int) -> None:
    from kubernetes import client

    kueue_dir = cp.manifest_dir / "kueue"
    documents = [
        copy.deepcopy(doc) for doc in load_yaml_documents(kueue_dir / "webhook" / "manifests.yaml")
    ]
    kustomization = load_yaml_documents(kueue_dir / "webhook" / "kustomization.yaml")[0]
    _customize_webhooks(documents, kustomization)
    api = client.AdmissionregistrationV1Api(cp.api_client())
    for doc in documents:
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": b64(cp.pki.webhook_ca.cert_pem),
            }
        if doc["kind"] == "MutatingWebhookConfiguration":
            _raw(api.create_mutating_webhook_configuration(doc, _preload_content=False))
        else:
            _raw(api.create_validating_webhook_configuration(doc, _preload_content=False))


def _customize_webhooks(documents: list[dict[str, Any]], kustomization: Mapping[str, Any]) -> None:
    """What the release's kustomization does to its webhooks: its patches (the namespaceSelector
    that skips kube-system and kueue-system), then its replacements (that selector copied to
    every other webhook), as ``kustomize build`` applies them."""
    import yaml

    by_name = {(doc["kind"], doc["metadata"]["name"]): doc for doc in documents}
    for entry in kustomization.get("patches", []):
        patch = yaml.safe_load(entry["patch"]) if "patch" in entry else {}
        target = by_name.get((patch.get("kind"), patch.get("metadata", {}).get("name")))
        for patched in patch.get("webhooks", []) if target else []:
            webhook = _webhook(target, patched["name"])
            webhook.update({k: v for k, v in patched.items() if k != "name"})
    for replacement in kustomization.get("replacements", []):
        source = replacement["source"]
        name, field = _field_path(source["fieldPath"])
        value = _webhook(by_name[(source["kind"], source["name"])], name)[field]
        for target in replacement["targets"]:
            doc = by_name[(target["select"]["kind"], target["select"]["name"])]
            for path in target["fieldPaths"]:
                name, field = _field_path(path)
                if any(w["name"] == name for w in doc["webhooks"]):
                    _webhook(doc, name)[field] = copy.deepcopy(value)


def _field_path(path: str) -> tuple[str, str]:
    """(webhook name, field) of a ``webhooks.[name=NAME].FIELD`` kustomize field path."""
    match = _FIELD_PATH.fullmatch(path)
    if match is None:
        raise ValueError(f"kueue's webhook kustomization names an unknown field path {path!r}")
    return match["webhook"], match["field"]


def _webhook(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(w for w in doc["webhooks"] if w["name"] == name)
    return found


def start_agent_sandbox(cp: ControlPlane) -> None:
    """Agent Sandbox's CRDs (core and extensions), then its controller, waiting until it is
    ready. The release serves no webhook: every CRD is single-version, without conversion."""
    processes = cp.processes
    health_port, metrics_port = processes.port("sandbox-health"), processes.port("sandbox-metrics")
    crd_dir = cp.manifest_dir / "agent-sandbox" / "crds"
    crds = [crd for path in sorted(crd_dir.glob("*.yaml")) for crd in load_yaml_documents(path)]
    converted = [
        crd["metadata"]["name"]
        for crd in crds
        if crd["spec"].get("conversion", {}).get("strategy") == "Webhook"
    ]
    if converted:
        raise ControlPlaneError(
            "sandbox-conversion-webhook",
            f"Agent Sandbox's CRDs {converted} convert by webhook; route it to 127.0.0.1 as "
            "start_kueue does for Kueue's before pinning this release",
        )
    _install_crds(cp, crds)
    controller = processes.spawn(
        "agent-sandbox-controller",
        [
            cp.build.binary("agent-sandbox-controller"),
            "--leader-elect=false",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--zap-log-level=info",
            f"--sandbox-concurrent-workers={SANDBOX_WORKERS}",  # kind/README.md sets the same
        ],
    )
    wait_until(
        "agent-sandbox-controller /readyz",
        lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"),
        cp.startup_timeout,
        controller,
    )
