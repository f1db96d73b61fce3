"""A real Kubernetes control plane for tests, run as local child processes on 127.0.0.1.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK (fake nodes whose
pods become Running and Ready), the Kueue manager and the Agent Sandbox controller,
built by scripts/build-control-plane.sh at the versions pinned in kind/versions.env.

    build = build_control_plane()
    with ControlPlane(build, nodes=2) as cp:
        api = cp.api_client()            # kubernetes.client.ApiClient, admin
        subprocess.run([...], env=cp.env())  # KUBECONFIG set

Test-only: nothing here is imported by `controller`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "kind" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-control-plane.sh"

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_WEBHOOK_SERVICE = "kueue-webhook-service"
KUEUE_WEBHOOK_SECRET = "kueue-webhook-server-cert"
KUEUE_CA_NAME = "kueue-ca"  # Kueue's cert rotator only keeps a CA whose SAN is this name.
SANDBOX_NAMESPACE = "agent-sandbox-system"
SANDBOX_WEBHOOK_SERVICE = "agent-sandbox-webhook-service"
SANDBOX_WEBHOOK_SECRET = "agent-sandbox-webhook-certs"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached; `reason` is machine-readable."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --- build ---------------------------------------------------------------------------


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse kind/versions.env (KEY=VALUE lines, '#' comments)."""
    versions: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip().strip("'\"")
    return versions


@dataclass(frozen=True)
class ControlPlaneBuild:
    """A built control plane: binaries under `bin_dir`, CRDs and webhooks under `manifest_dir`."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def manifest_dir(self) -> Path:
        return self.root / "manifests"

    def binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(
                "binary-missing",
                f"{path} is missing; run {BUILD_SCRIPT} to build the control plane",
            )
        return path


def find_go() -> str | None:
    """The `go` command the build script will use, or None (then nothing can be built)."""
    return shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")


def build_control_plane(*, timeout: float = 3600.0) -> ControlPlaneBuild:
    """Run scripts/build-control-plane.sh (a no-op when built) and return the build."""
    if find_go() is None:
        raise ControlPlaneError(
            "go-missing", "'go' is not on PATH; install Go >= 1.26 to build the control plane"
        )
    # Progress goes straight to the caller's stderr; stdout's last line is the directory.
    script = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, _ = script.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        os.killpg(script.pid, signal.SIGKILL)  # the script and the go commands it started
        script.wait()
        raise ControlPlaneError(
            "build-timeout", f"{BUILD_SCRIPT} ran longer than {timeout:.0f}s"
        ) from exc
    if script.returncode != 0:
        raise ControlPlaneError(
            "build-failed", f"{BUILD_SCRIPT} exited {script.returncode}; its output above says why"
        )
    return ControlPlaneBuild(Path(stdout.strip().splitlines()[-1]))


# --- certificates --------------------------------------------------------------------


@dataclass(frozen=True)
class _KeyPair:
    cert_pem: bytes
    key_pem: bytes


def _issue(
    common_name: str,
    *,
    ca: _KeyPair | None = None,
    is_ca: bool = False,
    organization: str | None = None,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    rsa_pkcs1: bool = False,
) -> _KeyPair:
    """A certificate and key (ECDSA P-256, PKCS#8; or RSA, PKCS#1 with `rsa_pkcs1`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key: Any = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if rsa_pkcs1
        else ec.generate_private_key(ec.SECP256R1())
    )
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    if ca is None:
        issuer, signing_key = subject, key
    else:
        issuer_cert = x509.load_pem_x509_certificate(ca.cert_pem)
        issuer = issuer_cert.subject
        signing_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        # Long-lived: Kueue's rotator replaces anything expiring within 90 days.
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(signing_key, hashes.SHA256())
    return _KeyPair(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL
            if rsa_pkcs1
            else serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _service_account_keys() -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- processes -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # If the test process dies, its control plane dies with it (Linux only).
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class _Component:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ControlPlaneError(
                "component-exited",
                f"{self.name} exited with status {code}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}",
            )


def wait_until(
    what: str, probe: Callable[[], Any], timeout: float, component: _Component | None = None
) -> Any:
    """Poll `probe` until it returns a truthy value and return that; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        if component is not None:
            component.check_alive()
        try:
            value = probe()
            if value:
                return value
        except ControlPlaneError:
            raise
        except Exception as exc:  # any probe failure means "not yet"
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            tail = ""
            if component is not None:
                tail = f"\nlast lines of {component.log_path}:\n{component.log_tail()}"
            raise ControlPlaneError(
                "not-ready", f"timed out after {timeout:.0f}s waiting for {what}{detail}{tail}"
            )
        time.sleep(0.25)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _raw(response: Any) -> dict[str, Any]:
    """The JSON body of a `_preload_content=False` call; reading it frees the connection."""
    result: dict[str, Any] = json.loads(response.data)
    return result


def _load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open() as handle:
        return [doc for doc in yaml.load_all(handle, Loader=loader) if doc]


# --- the control plane ---------------------------------------------------------------


@dataclass(frozen=True)
class NodeCapacity:
    """Allocatable resources of each fake KWOK node."""

    cpu: str = "16"
    memory: str = "64Gi"
    pods: str = "110"


@dataclass
class ControlPlane:
    """Start with `with ControlPlane(build) as cp:`; everything started is stopped on exit."""

    build: ControlPlaneBuild
    nodes: int = 2
    node_capacity: NodeCapacity = field(default_factory=NodeCapacity)
    kueue: bool = True
    agent_sandbox: bool = True
    kueue_frameworks: Sequence[str] = ("batch/job", "pod")
    startup_timeout: float = 180.0
    workdir: Path | None = None
    keep_workdir: bool = False

    def __post_init__(self) -> None:
        self._components: list[_Component] = []
        self._owns_workdir = self.workdir is None
        self._ports: dict[str, int] = {}
        self._failed = False

    # public surface ---------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        assert self.workdir is not None, "control plane not started"
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self._ports['apiserver']}"

    @property
    def bin_dir(self) -> Path:
        return self.build.bin_dir

    @property
    def manifest_dir(self) -> Path:
        return self.build.manifest_dir

    @property
    def node_names(self) -> list[str]:
        return [f"kwok-node-{index}" for index in range(self.nodes)]

    def log_path(self, component: str) -> Path:
        assert self.workdir is not None, "control plane not started"
        return self.workdir / "logs" / f"{component}.log"

    def env(self) -> dict[str, str]:
        """The caller's environment with KUBECONFIG pointing at this control plane."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def api_client(self) -> Any:
        """A new admin `kubernetes.client.ApiClient`."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def running_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout: float = 60.0,
    ) -> Iterator[Any]:
        """Yield each pod (V1Pod) once, when KWOK first reports it Running; ends after `timeout` s.

        This is the hook for tests that run a pod's application as a local process:
        `for pod in cp.running_pods(namespace=ns): subprocess.Popen(pod_command(pod), ...)`.
        """
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api_client())
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            kwargs: dict[str, Any] = {"timeout_seconds": max(1, int(remaining))}
            if label_selector:
                kwargs["label_selector"] = label_selector
            lister = core.list_pod_for_all_namespaces
            if namespace:
                lister, kwargs["namespace"] = core.list_namespaced_pod, namespace
            stream = watch.Watch().stream(lister, **kwargs)
            for event in stream:
                pod = event["object"]
                if (
                    event["type"] in ("ADDED", "MODIFIED")
                    and pod.status
                    and pod.status.phase == "Running"
                ):
                    if pod.metadata.uid not in seen:
                        seen.add(pod.metadata.uid)
                        yield pod
                if time.monotonic() > deadline:
                    return

    # lifecycle --------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="society-control-plane-"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._start_kube_controllers()
            self._start_kwok()
            if self.kueue:
                self._start_kueue()
            if self.agent_sandbox:
                self._start_agent_sandbox()
        except BaseException:
            self._failed = True  # keep the logs for the error message's reader
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component this instance started, newest first, by pid."""
        while self._components:
            component = self._components.pop()
            process = component.process
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        keep = self.keep_workdir or self._failed
        if self.workdir is not None and self._owns_workdir and not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # internals --------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        assert self.workdir is not None
        return self.workdir / name

    def _spawn(self, name: str, argv: Sequence[str | os.PathLike[str]]) -> _Component:
        log_path = self.log_path(name)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [str(arg) for arg in argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        component = _Component(name, process, log_path)
        self._components.append(component)
        return component

    def _port(self, name: str) -> int:
        self._ports[name] = _free_port()
        return self._ports[name]

    def _write_pki(self) -> None:
        pki = self._path("pki")
        pki.mkdir(exist_ok=True)
        self._ca = _issue("society-runner-test-ca", is_ca=True)
        self._apiserver_cert = _issue(
            "kube-apiserver",
            ca=self._ca,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", "10.96.0.1"],
            server=True,
        )
        self._admin_cert = _issue(
            "kubernetes-admin", ca=self._ca, organization="system:masters", client=True
        )
        # One webhook CA for the out-of-cluster controllers; named so Kueue's rotator keeps it.
        # Kueue's rotator also parses the CA key as PKCS#1 RSA.
        self._webhook_ca = _issue(
            KUEUE_CA_NAME,
            is_ca=True,
            dns_names=[KUEUE_CA_NAME],
            organization="kueue",
            rsa_pkcs1=True,
        )
        self._webhook_cert = _issue(
            f"{KUEUE_WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc",
            ca=self._webhook_ca,
            dns_names=[
                f"{KUEUE_WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc",
                f"{SANDBOX_WEBHOOK_SERVICE}.{SANDBOX_NAMESPACE}.svc",
                "localhost",
            ],
            ip_addresses=["127.0.0.1"],
            server=True,
        )
        # Lets controllers' delegated authentication trust the apiserver's proxied requests.
        front_proxy = _issue("front-proxy-client", ca=self._ca, client=True)
        sa_private, sa_public = _service_account_keys()
        files = {
            "ca.crt": self._ca.cert_pem,
            "ca.key": self._ca.key_pem,
            "apiserver.crt": self._apiserver_cert.cert_pem,
            "apiserver.key": self._apiserver_cert.key_pem,
            "admin.crt": self._admin_cert.cert_pem,
            "admin.key": self._admin_cert.key_pem,
            "front-proxy-client.crt": front_proxy.cert_pem,
            "front-proxy-client.key": front_proxy.key_pem,
            "sa.key": sa_private,
            "sa.pub": sa_public,
        }
        for name, data in files.items():
            (pki / name).write_bytes(data)
        self._port("apiserver")
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "society-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(self._ca.cert_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": _b64(self._admin_cert.cert_pem),
                        "client-key-data": _b64(self._admin_cert.key_pem),
                    },
                }
            ],
            "contexts": [
                {"name": "society-test", "context": {"cluster": "society-test", "user": "admin"}}
            ],
            "current-context": "society-test",
        }
        self.kubeconfig.write_text(json.dumps(kubeconfig, indent=2))
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self) -> None:
        client_port, peer_port = self._port("etcd"), self._port("etcd-peer")
        etcd = self._spawn(
            "etcd",
            [
                self.build.binary("etcd"),
                "--name=etcd0",
                f"--data-dir={self._path('etcd-data')}",
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
        wait_until(
            "etcd /health", lambda: _http_ok(f"http://127.0.0.1:{client_port}/health"), 60, etcd
        )

    def _start_apiserver(self) -> None:
        pki = self._path("pki")
        apiserver = self._spawn(
            "kube-apiserver",
            [
                self.build.binary("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self._ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self._ports['apiserver']}",
                f"--cert-dir={self._path('apiserver-certs')}",
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
                # No kubelet or kube-proxy: nothing would reach an endpoint on loopback.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
        )
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        wait_until(
            "kube-apiserver /readyz",
            lambda: _http_ok(f"{self.server}/readyz", context),
            self.startup_timeout,
            apiserver,
        )

    def _start_kube_controllers(self) -> None:
        pki = self._path("pki")
        kubeconfig = str(self.kubeconfig)
        auth = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        kcm_port, scheduler_port = (
            self._port("kube-controller-manager"),
            self._port("kube-scheduler"),
        )
        kcm = self._spawn(
            "kube-controller-manager",
            [
                self.build.binary("kube-controller-manager"),
                *auth,
                f"--secure-port={kcm_port}",
                f"--cert-dir={self._path('kcm-certs')}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--use-service-account-credentials=false",
                "--controllers=*",
            ],
        )
        scheduler = self._spawn(
            "kube-scheduler",
            [
                self.build.binary("kube-scheduler"),
                *auth,
                f"--secure-port={scheduler_port}",
            ],
        )
        wait_until(
            "kube-controller-manager /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{kcm_port}/healthz", _insecure()),
            self.startup_timeout,
            kcm,
        )
        wait_until(
            "kube-scheduler /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{scheduler_port}/healthz", _insecure()),
            self.startup_timeout,
            scheduler,
        )
        # Pods need their namespace's "default" ServiceAccount (ServiceAccount admission).
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        wait_until(
            "the default ServiceAccount (kube-controller-manager)",
            lambda: bool(core.read_namespaced_service_account("default", "default")),
            60,
            kcm,
        )

    def _start_kwok(self) -> None:
        # kwokctl's default stages: nodes turn Ready and renew leases; pods on them turn
        # Running and Ready at once, Job pods complete, deleted pods go away. Nothing runs.
        stages = self.manifest_dir / "kwok" / "stages"
        config = [
            *_load_yaml_documents(stages / "node" / "fast" / "node-initialize.yaml"),
            *_load_yaml_documents(
                stages / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml"
            ),
        ]
        for stage in ("pod-ready", "pod-complete", "pod-delete"):
            config += _load_yaml_documents(stages / "pod" / "fast" / f"{stage}.yaml")
        config_path = self._path("kwok.yaml")
        config_path.write_text("\n---\n".join(json.dumps(doc) for doc in config))
        port = self._port("kwok")
        kwok = self._spawn(
            "kwok",
            [
                self.build.binary("kwok"),
                f"--kubeconfig={self.kubeconfig}",
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
            lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"),
            self.startup_timeout,
            kwok,
        )
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        capacity = {
            "cpu": self.node_capacity.cpu,
            "memory": self.node_capacity.memory,
            "pods": self.node_capacity.pods,
        }
        for name in self.node_names:
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
            return ready == self.nodes

        wait_until(f"{self.nodes} KWOK node(s) Ready", nodes_ready, self.startup_timeout, kwok)

    # add-ons: CRDs, webhooks and out-of-cluster controllers --------------------------------

    def _ensure_namespace_with_secret(
        self, namespace: str, secret: str, data: Mapping[str, bytes]
    ) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        core.create_namespace({"metadata": {"name": namespace}})
        core.create_namespaced_secret(
            namespace,
            {
                "metadata": {"name": secret},
                "type": "Opaque",
                "data": {key: _b64(value) for key, value in data.items()},
            },
        )

    def _install_crds(self, crds: list[dict[str, Any]]) -> None:
        from kubernetes import client

        api = client.ApiextensionsV1Api(self.api_client())
        for crd in crds:
            _raw(api.create_custom_resource_definition(crd, _preload_content=False))

        def established() -> bool:
            for crd in crds:
                current = _raw(
                    api.read_custom_resource_definition(
                        crd["metadata"]["name"], _preload_content=False
                    )
                )
                conditions = current.get("status", {}).get("conditions", [])
                if not any(
                    c["type"] == "Established" and c["status"] == "True" for c in conditions
                ):
                    return False
            return True

        wait_until(f"{len(crds)} CRD(s) Established", established, 60)

    def _conversion(self, port: int) -> dict[str, Any]:
        return {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/convert",
                    "caBundle": _b64(self._webhook_ca.cert_pem),
                },
            },
        }

    def _start_kueue(self) -> None:
        kueue_dir = self.manifest_dir / "kueue"
        webhook_port, health_port, metrics_port = (
            self._port("kueue-webhook"),
            self._port("kueue-health"),
            self._port("kueue-metrics"),
        )
        # Kueue's rotator keeps a valid pre-seeded secret and only injects its CA
        # into the webhooks: the url clientConfigs written below stay as they are.
        self._ensure_namespace_with_secret(
            KUEUE_NAMESPACE,
            KUEUE_WEBHOOK_SECRET,
            {
                "ca.crt": self._webhook_ca.cert_pem,
                "ca.key": self._webhook_ca.key_pem,
                "tls.crt": self._webhook_cert.cert_pem,
                "tls.key": self._webhook_cert.key_pem,
            },
        )
        converted = {
            (doc["metadata"]["name"])
            for patch in (kueue_dir / "crd-conversion-patches" / "enabled.txt").read_text().split()
            for doc in _load_yaml_documents(kueue_dir / "crd-conversion-patches" / patch)
        }
        crds = [
            crd
            for path in sorted((kueue_dir / "crds").glob("*.yaml"))
            for crd in _load_yaml_documents(path)
        ]
        for crd in crds:
            if crd["metadata"]["name"] in converted:
                crd["spec"]["conversion"] = self._conversion(webhook_port)
        self._install_crds(crds)
        self._install_kueue_webhooks(webhook_port)
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
            "webhook": {
                "host": "127.0.0.1",
                "port": webhook_port,
                "certDir": str(self._path("kueue-certs")),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": KUEUE_WEBHOOK_SERVICE,
                "webhookSecretName": KUEUE_WEBHOOK_SECRET,
            },
            "clientConnection": {"qps": 50, "burst": 100},
            "integrations": {"frameworks": list(self.kueue_frameworks)},
        }
        # In a cluster the kubelet mounts the secret here; the rotator waits for the files.
        cert_dir = self._path("kueue-certs")
        cert_dir.mkdir()
        (cert_dir / "ca.crt").write_bytes(self._webhook_ca.cert_pem)
        (cert_dir / "tls.crt").write_bytes(self._webhook_cert.cert_pem)
        (cert_dir / "tls.key").write_bytes(self._webhook_cert.key_pem)
        config_path = self._path("kueue.yaml")
        config_path.write_text(json.dumps(config, indent=2))
        kueue = self._spawn(
            "kueue",
            [
                self.build.binary("kueue"),
                f"--config={config_path}",
                "--zap-log-level=2",
                # The visibility API would need an APIService routed to 127.0.0.1.
                "--feature-gates=VisibilityOnDemand=false",
            ],
        )
        wait_until(
            "kueue /readyz",
            lambda: _http_ok(f"http://127.0.0.1:{health_port}/readyz"),
            self.startup_timeout,
            kueue,
        )

    def _install_kueue_webhooks(self, port: int) -> None:
        import yaml
        from kubernetes import client

        kueue_dir = self.manifest_dir / "kueue"
        # The release's kustomization adds namespaceSelectors (skip kube-system, kueue-system).
        patches: dict[str, dict[str, Any]] = {}
        kustomization = _load_yaml_documents(kueue_dir / "webhook" / "kustomization.yaml")[0]
        for entry in kustomization.get("patches", []):
            patch = yaml.safe_load(entry["patch"]) if "patch" in entry else {}
            for webhook in patch.get("webhooks", []):
                patches[webhook["name"]] = webhook
        api = client.AdmissionregistrationV1Api(self.api_client())
        for doc in _load_yaml_documents(kueue_dir / "webhook" / "manifests.yaml"):
            doc = copy.deepcopy(doc)
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            for webhook in doc["webhooks"]:
                path = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": _b64(self._webhook_ca.cert_pem),
                }
                webhook.update(
                    {k: v for k, v in patches.get(webhook["name"], {}).items() if k != "name"}
                )
            if doc["kind"] == "MutatingWebhookConfiguration":
                _raw(api.create_mutating_webhook_configuration(doc, _preload_content=False))
            else:
                _raw(api.create_validating_webhook_configuration(doc, _preload_content=False))

    def _start_agent_sandbox(self) -> None:
        from kubernetes import client

        webhook_port, health_port, metrics_port = (
            self._port("sandbox-webhook"),
            self._port("sandbox-health"),
            self._port("sandbox-metrics"),
        )
        # The controller loads this secret instead of generating a cert for its in-cluster Service.
        self._ensure_namespace_with_secret(
            SANDBOX_NAMESPACE,
            SANDBOX_WEBHOOK_SECRET,
            {
                "ca.crt": self._webhook_ca.cert_pem,
                "tls.crt": self._webhook_cert.cert_pem,
                "tls.key": self._webhook_cert.key_pem,
            },
        )
        crd_dir = self.manifest_dir / "agent-sandbox" / "crds"
        crds = [
            crd for path in sorted(crd_dir.glob("*.yaml")) for crd in _load_yaml_documents(path)
        ]
        # Installed without conversion first: at startup the controller rewrites Webhook
        # conversion to its in-cluster Service, which cannot be reached from here.
        converted = [
            crd["metadata"]["name"]
            for crd in crds
            if crd["spec"].get("conversion", {}).get("strategy") == "Webhook"
        ]
        for crd in crds:
            crd["spec"]["conversion"] = {"strategy": "None"}
        self._install_crds(crds)
        controller = self._spawn(
            "agent-sandbox-controller",
            [
                self.build.binary("agent-sandbox-controller"),
                "--leader-elect=false",
                f"--webhook-port={webhook_port}",
                f"--webhook-cert-dir={self._path('agent-sandbox-certs')}",
                f"--webhook-service-name={SANDBOX_WEBHOOK_SERVICE}",
                f"--webhook-namespace={SANDBOX_NAMESPACE}",
                f"--health-probe-bind-address=127.0.0.1:{health_port}",
                f"--metrics-bind-address=127.0.0.1:{metrics_port}",
                "--zap-log-level=info",
            ],
        )
        wait_until(
            "agent-sandbox-controller /readyz",
            lambda: _http_ok(f"http://127.0.0.1:{health_port}/readyz"),
            self.startup_timeout,
            controller,
        )
        wait_until(
            "agent-sandbox webhook port",
            lambda: _tcp_open(webhook_port),
            self.startup_timeout,
            controller,
        )
        api = client.ApiextensionsV1Api(self.api_client())
        for name in converted:
            patch = {"spec": {"conversion": self._conversion(webhook_port)}}
            _raw(api.patch_custom_resource_definition(name, patch, _preload_content=False))


def _tcp_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pod_command(pod: Any, container: str | None = None) -> list[str]:
    """The command + args of `container` (default: the first) in a V1Pod, to run it locally."""
    containers = pod.spec.containers
    chosen = (
        next((c for c in containers if c.name == container), None) if container else containers[0]
    )
    if chosen is None:
        raise ControlPlaneError(
            "no-such-container", f"pod {pod.metadata.name} has no container {container!r}"
        )
    return [*(chosen.command or []), *(chosen.args or [])]
