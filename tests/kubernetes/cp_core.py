"""The core of the test control plane: etcd, kube-apiserver, controller-manager, scheduler, KWOK."""

from __future__ import annotations

import json
import ssl
from typing import TYPE_CHECKING

from cp_build import load_yaml_documents
from cp_processes import http_ok, insecure, wait_until

if TYPE_CHECKING:
    from controlplane import ControlPlane

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def start_etcd(cp: ControlPlane) -> None:
    processes = cp.processes
    client_port, peer_port = processes.port("etcd"), processes.port("etcd-peer")
    etcd = processes.spawn(
        "etcd",
        [
            cp.build.binary("etcd"),
            "--name=etcd0",
            f"--data-dir={processes.path('etcd-data')}",
            f"--listen-client-urls=http://127.0.0.1:{client_port}",
            f"--advertise-client-urls=http://127.0.0.1:{client_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=etcd0=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync=true",  # test data; durability is not under test here
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=1073741824",
            "--log-level=warn",
        ],
    )
    wait_until("etcd /health", lambda: http_ok(f"http://127.0.0.1:{client_port}/health"), 60, etcd)


def start_apiserver(cp: ControlPlane) -> None:
    processes = cp.processes
    pki = processes.path("pki")
    apiserver = processes.spawn(
        "kube-apiserver",
        [
            cp.build.binary("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{processes.ports['etcd']}",
            f"--bind-address={cp.address}",
            f"--advertise-address={cp.address}",
            f"--secure-port={processes.ports['apiserver']}",
            f"--cert-dir={processes.path('apiserver-certs')}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            # No pod that runs reaches this API server (KWOK's pods run nothing), and nothing
            # would reach an endpoint on loopback.
            "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            "--profiling=false",
        ],
    )
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    wait_until(
        "kube-apiserver /readyz",
        lambda: http_ok(f"{cp.server}/readyz", context),
        cp.startup_timeout,
        apiserver,
    )


def start_kube_controllers(cp: ControlPlane) -> None:
    """kube-controller-manager and kube-scheduler, then the default ServiceAccount."""
    processes = cp.processes
    pki = processes.path("pki")
    kubeconfig = str(cp.kubeconfig)
    auth = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        # No client-side throttling (as kwokctl runs them): the defaults (scheduler 50 QPS,
        # controller-manager 20) would pace a 1,000-pod roster's bindings, not the API server.
        "--kube-api-qps=5000",
        "--kube-api-burst=10000",
    ]
    kcm_port, scheduler_port = (
        processes.port("kube-controller-manager"),
        processes.port("kube-scheduler"),
    )
    kcm = processes.spawn(
        "kube-controller-manager",
        [
            cp.build.binary("kube-controller-manager"),
            *auth,
            f"--secure-port={kcm_port}",
            f"--cert-dir={processes.path('kcm-certs')}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=false",
            "--controllers=*",
        ],
    )
    scheduler = processes.spawn(
        "kube-scheduler",
        [
            cp.build.binary("kube-scheduler"),
            *auth,
            f"--secure-port={scheduler_port}",
        ],
    )
    wait_until(
        "kube-controller-manager /healthz",
        lambda: http_ok(f"https://127.0.0.1:{kcm_port}/healthz", insecure()),
        cp.startup_timeout,
        kcm,
    )
    wait_until(
        "kube-scheduler /healthz",
        lambda: http_ok(f"https://127.0.0.1:{scheduler_port}/healthz", insecure()),
        cp.startup_timeout,
        scheduler,
    )
    # Pods need their namespace's "default" ServiceAccount (ServiceAccount admission).
    from kubernetes import client

    core = client.CoreV1Api(cp.api_client())
    wait_until(
        "the default ServiceAccount (kube-controller-manager)",
        lambda: bool(core.read_namespaced_service_account("default", "default")),
        60,
        kcm,
    )


def start_kwok(cp: ControlPlane) -> None:
    """The KWOK controller and `cp.nodes` fake nodes, waiting until they are Ready."""
    processes = cp.processes
    # kwokctl's default stages: nodes turn Ready and renew leases; pods on them turn
    # Running and Ready at once, Job pods complete, deleted pods go away. Nothing runs.
    stages = cp.manifest_dir / "kwok" / "stages"
    config = [
        *load_yaml_documents(stages / "node" / "fast" / "node-initialize.yaml"),
        *load_yaml_documents(
            stages / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml"
        ),
    ]
    for stage in ("pod-ready", "pod-complete", "pod-delete"):
        config += load_yaml_documents(stages / "pod" / "fast" / f"{stage}.yaml")
    config_path = processes.path("kwok.yaml")
    config_path.write_text("\n---\n".join(json.dumps(doc) for doc in config))
    port = processes.port("kwok")
    kwok = processes.spawn(
        "kwok",
        [
            cp.build.binary("kwok"),
            f"--kubeconfig={cp.kubeconfig}",
            f"--config={config_path}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--cidr=10.244.0.1/16",
            "--node-ip=127.0.0.1",
            "--node-name=kwok-controller",
            f"--node-port={port}",
            f"--server-address=127.0.0.1:{port}",
            "--node-lease-duration-seconds=40",
        ],
    )
    wait_until(
        "kwok /healthz",
        lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
        cp.startup_timeout,
        kwok,
    )
    from kubernetes import client

    core = client.CoreV1Api(cp.api_client())
    capacity = {
        "cpu": cp.node_capacity.cpu,
        "memory": cp.node_capacity.memory,
        "pods": cp.node_capacity.pods,
        "ephemeral-storage": cp.node_capacity.ephemeral_storage,
    }
    for name in cp.node_names:
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        KWOK_NODE_ANNOTATION: "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "kubernetes.io/role": "agent",
                    },
                },
                "spec": {},
                "status": {
                    "allocatable": capacity,
                    "capacity": capacity,
                },
            }
        )

    def nodes_ready() -> bool:
        ready = 0
        for node in core.list_node(label_selector="type=kwok").items:
            conditions = node.status.conditions or []
            ready += any(c.type == "Ready" and c.status == "True" for c in conditions)
        return ready == cp.nodes

    wait_until(f"{cp.nodes} KWOK node(s) Ready", nodes_ready, cp.startup_timeout, kwok)
