"""The test harness's real worker node: containerd 2.x with Debian's runc and CNI plugins, the
kubelet, kube-proxy (nftables) and kube-router (NetworkPolicy only), all in the node's network
namespace (``cp_netns``), with state under the control plane's work directory.

Started after the control plane; stopped before it, in order: the pods deleted through the API,
then kube-router, kube-proxy and the kubelet, then containerd, then its shims (they outlive it),
then what is left of mounts and cgroups, and the kernel settings the kubelet changed are put
back. The images (``scripts/build-images.sh``) are imported into containerd under their
digests before the kubelet starts, so pods reference them by digest and nothing is pulled.

Why kube-router and not kube-network-policies (what kind runs): the latter queues packets with
nftables ``queue``, and this kernel has no ``CONFIG_NFT_QUEUE``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cp_build import ControlPlaneError
from cp_certificates import issue, write_kubeconfig
from cp_netns import METADATA_ADDRESS, NodeNetwork
from cp_processes import ProcessGroup, http_ok, wait_until

if TYPE_CHECKING:
    from controlplane import ControlPlane

NODE_LABEL = "society.test/node"
"""Label of the real node (value ``real``); KWOK nodes of a plane with one carry KWOK_TAINT."""
KWOK_TAINT = {"key": "society.test/kwok", "value": "fake", "effect": "NoSchedule"}
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
"""What the kubelet sets at start (setupKernelTunables); saved before and put back after."""
POD_DELETE_TIMEOUT_S = 60.0
NODE_IMAGES = ("pause", "python", "controller", "openclaw", "nanoclaw")
"""The images the node imports (python serves the scripted, llm and peer runtimes; the run
worker's image runs in no harness pod)."""
HOST_DIRS = (Path("/var/lib/cni"), Path("/var/log/containers"))
"""Fixed paths the CNI library (its result cache) and the kubelet (log symlinks) write to; what
the node put there goes at stop, and each directory too if the node made it."""


@dataclass(frozen=True)
class Images:
    """The image map of scripts/build-images.sh: name -> ref@digest, and each ref's archive."""

    path: Path
    images: dict[str, str]
    archives: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> Images:
        data = json.loads(path.read_text())
        return cls(path, dict(data["images"]), dict(data["archives"]))

    def ref(self, name: str) -> str:
        return self.images[name if ":" in name else f"society/{name}:dev"]

    def snapshot(self, directory: Path) -> Images:
        """This map and its archives as of now, under ``directory``: a later
        scripts/build-images.sh (another worktree's, or a changed tree's) replaces the shared
        map and archives, and a running node must keep resolving to what it imported. The
        archives are hard links (the build renames new ones into place), copies across
        filesystems."""
        directory.mkdir(parents=True, exist_ok=True)
        archives = {}
        for ref, source in self.archives.items():
            target = directory / Path(source).name
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
            archives[ref] = str(target)
        path = directory / "images.json"
        path.write_text(json.dumps({"images": self.images, "archives": archives}, indent=2))
        return Images(path, dict(self.images), archives)


@dataclass
class RealNode:
    """One real worker node of ``cp``; ``start`` then ``stop`` (idempotent)."""

    cp: ControlPlane
    network: NodeNetwork
    images: Images
    name: str = ""
    processes: ProcessGroup = field(default_factory=ProcessGroup)
    sysctls: dict[str, str] = field(default_factory=dict)
    made_dirs: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.name or f"society-node-{self.network.index}"
        self.processes.workdir = self.cp.processes.path(f"node-{self.network.index}")

    @property
    def root(self) -> Path:
        assert self.processes.workdir is not None
        return self.processes.workdir

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/{self.name}"

    def ctr(self, *args: str) -> str:
        argv = [str(self.cp.build.binary("ctr")), "--address", str(self.containerd_socket)]
        done = subprocess.run([*argv, "-n", "k8s.io", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise ControlPlaneError("ctr-failed", f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # ---- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.made_dirs = [d for d in HOST_DIRS if not d.exists()]
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.processes.log_path = self.cp.processes.log_path  # type: ignore[method-assign]
        self._write_credentials()
        self._start_containerd()
        self._import_images()
        self._write_cni()
        self._make_cgroup_root()
        self._start_kubelet()
        self._start_kube_proxy()
        self._start_kube_router()
        self._start_metadata()

    def _spawn(self, name: str, argv: list[str]) -> Any:
        env_path = f"{self.cp.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"
        return self.processes.spawn(name, ["env", f"PATH={env_path}", *self.network.enter(), *argv])

    def _write_credentials(self) -> None:
        pki, ca = self.cp.pki, self.cp.pki.ca
        users = {
            "kubelet": issue(
                f"system:node:{self.name}", ca=ca, organization="system:nodes", client=True
            ),
            "kube-proxy": issue("system:kube-proxy", ca=ca, client=True),
            "kube-router": issue("society:kube-router", ca=ca, client=True),
        }
        for user, pair in users.items():
            write_kubeconfig(
                self.root / f"{user}.kubeconfig",
                self.cp.server,
                type(pki)(ca=ca, apiserver=pki.apiserver, admin=pair, webhook_ca=pki.webhook_ca,
                          webhook=pki.webhook),
            )  # fmt: skip
        (self.root / "ca.crt").write_bytes(ca.cert_pem)
        _grant_kube_router(self.cp)

    def _start_containerd(self) -> None:
        base = self.root / "containerd"
        sandbox = self.images.ref("pause")
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        config = f"""version = 3
root = '{base}/root'
state = '{base}/state'
temp = '{base}/tmp'
imports = []
[grpc]
  address = '{self.containerd_socket}'
[ttrpc]
  address = '{self.containerd_socket}.ttrpc'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{sandbox}'
[{runtime}]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_criu = false
  cdi_spec_dirs = []
[{runtime}.containerd]
  default_runtime_name = 'runc'
[{runtime}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
[{runtime}.containerd.runtimes.runc.options]
  BinaryName = '/usr/sbin/runc'
  Root = '{base}/runc'
  SystemdCgroup = false
[{runtime}.cni]
  bin_dirs = ['/usr/lib/cni']
  conf_dir = '{self.root / "cni"}'
  max_conf_num = 1
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
[plugins.'io.containerd.internal.v1.opt']
  path = '{base}/opt'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
"""
        for directory in ("root", "state", "tmp", "opt", "runc"):
            (base / directory).mkdir(parents=True, exist_ok=True)
        path = self.root / "containerd.toml"
        path.write_text(config)
        containerd = self._spawn(
            "containerd", [str(self.cp.build.binary("containerd")), "--config", str(path)]
        )
        wait_until(
            "containerd's socket",
            lambda: self.containerd_socket.is_socket() and self.ctr("version"),
            60,
            containerd,
        )

    def _import_images(self) -> None:
        for ref, archive in sorted(self.images.archives.items()):
            name = ref.split("@", 1)[0]
            if name.rsplit("/", 1)[-1] not in NODE_IMAGES:
                continue
            self.ctr("images", "import", "--base-name", name, archive)
            # The archive names its manifest name:build; pods name it name@sha256:<manifest>.
            self.ctr("images", "tag", "--force", f"{name}:build", ref)

    def _write_cni(self) -> None:
        (self.root / "cni").mkdir(exist_ok=True)
        conflist = {
            "cniVersion": "1.0.0",
            "name": self.name,
            "plugins": [
                {
                    "type": "ptp",
                    "ipMasq": False,
                    "mtu": 1500,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.network.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.root / "cni-ipam"),
                    },
                }
            ],
        }
        (self.root / "cni" / "10-society.conflist").write_text(json.dumps(conflist, indent=2))

    def _make_cgroup_root(self) -> None:
        for hierarchy in _cgroup_hierarchies():
            (hierarchy / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)

    def _start_kubelet(self) -> None:
        self.sysctls = {name: _read_sysctl(name) for name in KUBELET_SYSCTLS}
        root = self.root / "kubelet"
        root.mkdir(exist_ok=True)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "maxPods": self.cp.real_node_max_pods,
            "readOnlyPort": 0,
            "enforceNodeAllocatable": [],
            "address": self.network.node_ip,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.root / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.root / "pod-logs"),
            "volumePluginDir": str(self.root / "volume-plugins"),
            "resolvConf": "",
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "shutdownGracePeriod": "0s",
            "oomScoreAdj": 0,
        }
        path = self.root / "kubelet.json"
        path.write_text(json.dumps(config, indent=2))
        kubelet = self._spawn(
            "kubelet",
            [
                str(self.cp.build.binary("kubelet")),
                f"--config={path}",
                f"--kubeconfig={self.root / 'kubelet.kubeconfig'}",
                f"--root-dir={root}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.network.node_ip}",
                f"--node-labels={NODE_LABEL}=real",
            ],
        )
        from kubernetes import client

        core = client.CoreV1Api(self.cp.api_client())

        def ready() -> bool:
            node = core.read_node(self.name)
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )

        wait_until(f"node {self.name} Ready", ready, self.cp.startup_timeout, kubelet)

    def _start_kube_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": {"kubeconfig": str(self.root / "kube-proxy.kubeconfig")},
            "hostnameOverride": self.name,
            "clusterCIDR": self.network.pod_cidr,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "oomScoreAdj": 0,
            # Zero leaves the (machine-wide) conntrack settings as they are.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
                "udpTimeout": "0s",
                "udpStreamTimeout": "0s",
            },
        }
        path = self.root / "kube-proxy.json"
        path.write_text(json.dumps(config, indent=2))
        proxy = self._spawn(
            "kube-proxy", [str(self.cp.build.binary("kube-proxy")), f"--config={path}"]
        )
        wait_until(
            "kube-proxy /healthz", lambda: self._answers(10256), self.cp.startup_timeout, proxy
        )

    def _start_kube_router(self) -> None:
        self._spawn(
            "kube-router",
            [
                str(self.cp.build.binary("kube-router")),
                f"--kubeconfig={self.root / 'kube-router.kubeconfig'}",
                f"--hostname-override={self.name}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--enable-cni=false",
                "--enable-ipv6=false",
                "--health-port=20244",
                "--metrics-port=0",
            ],
        )
        router = self.processes.components[-1]
        wait_until(
            "kube-router /healthz", lambda: self._answers(20244), self.cp.startup_timeout, router
        )

    def _start_metadata(self) -> None:
        """An HTTP server on 169.254.169.254:80 in the node's namespace, as a cloud's metadata
        endpoint: a test that a pod cannot reach it means something only if it answers."""
        empty = self.root / "metadata"
        empty.mkdir(exist_ok=True)
        address = METADATA_ADDRESS
        server = self._spawn(
            "metadata",
            ["python3", "-m", "http.server", "80", "--bind", address, "--directory", str(empty)],
        )
        wait_until("the metadata stand-in", lambda: self._answers(80, address), 30, server)

    def _answers(self, port: int, host: str = "127.0.0.1") -> bool:
        """Whether an HTTP server answers at host:port inside the node's namespace."""
        probe = (
            "import sys, urllib.request as u\n"
            f"try: u.urlopen('http://{host}:{port}/healthz', timeout=2)\n"
            "except u.HTTPError: pass\n"
            "except OSError: sys.exit(1)"
        )
        try:
            self.network.run("python3", "-c", probe)
        except ControlPlaneError:
            return False
        return True

    # ---- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Pods through the API, then the node's programs, then what they leave behind."""
        try:
            self._delete_pods()
        finally:
            self.processes.stop()  # newest first: kube-router, kube-proxy, kubelet, containerd
            self._kill_shims()
            _unmount_under(self.root)
            self._remove_cgroups()
            self._remove_host_files()
            for name, value in self.sysctls.items():
                if _read_sysctl(name) != value:
                    _write_sysctl(name, value)
            self.sysctls = {}

    def _delete_pods(self) -> None:
        if not any(
            c.name == "kubelet" and c.process.poll() is None for c in self.processes.components
        ):
            return
        from kubernetes import client

        core = client.CoreV1Api(self.cp.api_client())
        selector = f"spec.nodeName={self.name}"
        for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        deadline = time.monotonic() + POD_DELETE_TIMEOUT_S
        while core.list_pod_for_all_namespaces(field_selector=selector).items:
            if time.monotonic() > deadline:
                for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
                    with contextlib.suppress(client.ApiException):
                        core.delete_namespaced_pod(
                            pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                        )
                break
            time.sleep(0.25)

    def _kill_shims(self) -> None:
        """The runc shims this node's containerd started (their command line names its socket)."""
        address = str(self.containerd_socket)
        for pid in _pids_with_argument(address):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _remove_host_files(self) -> None:
        for path in _host_files(self):
            with contextlib.suppress(OSError):
                path.unlink()
        for directory in self.made_dirs:
            for sub in sorted(directory.rglob("*"), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                directory.rmdir()

    def _remove_cgroups(self) -> None:
        for hierarchy in _cgroup_hierarchies():
            top = hierarchy / self.cgroup_root.lstrip("/")
            if not top.exists():
                continue
            for directory in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _grant_kube_router(cp: ControlPlane) -> None:
    """What kube-router's firewall reads: pods, namespaces, nodes, policies (read only)."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(cp.api_client())
    name = "society-test-kube-router"
    with contextlib.suppress(client.ApiException):  # a second node of the same plane
        rbac.create_cluster_role(
            {
                "metadata": {"name": name},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": ["networking.k8s.io"],
                        "resources": ["networkpolicies"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["get", "list", "watch"],
                    },
                ],
            }
        )
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": "society:kube-router"}],
            }
        )  # fmt: skip


def _cgroup_hierarchies() -> list[Path]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            mounts.append(point)
    return mounts


def _unmount_under(root: Path) -> None:
    """Whatever containerd and the kubelet left mounted in the node's directory, deepest first."""
    for point in sorted(_mounts_under(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _pids_with_argument(argument: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


def _read_sysctl(name: str) -> str:
    return Path("/proc/sys", name).read_text().strip()


def _write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", name).write_text(value)


def _host_files(node: RealNode) -> list[Path]:
    """The CNI results of this node's network and the kubelet's links into its directory."""
    results = HOST_DIRS[0] / "results"
    found = list(results.glob(f"{node.name}-*")) if results.is_dir() else []
    if HOST_DIRS[1].is_dir():
        for link in HOST_DIRS[1].iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and str(node.root) in os.readlink(link):
                    found.append(link)
    return found


def node_leftovers(node: RealNode) -> list[str]:
    """What a stopped node left on the machine (empty when it cleaned up)."""
    found = [f"mount {m}" for m in _mounts_under(node.root)]
    found += [f"file {p}" for p in _host_files(node)]
    found += [f"directory {d}" for d in node.made_dirs if d.exists()]
    found += [f"shim pid {p}" for p in _pids_with_argument(str(node.containerd_socket))]
    for hierarchy in _cgroup_hierarchies():
        if (hierarchy / node.cgroup_root.lstrip("/")).exists():
            found.append(f"cgroup {hierarchy / node.cgroup_root.lstrip('/')}")
    for component in node.processes.components:
        if component.process.poll() is None:
            found.append(f"process {component.name}")
    with contextlib.suppress(OSError):
        if http_ok(f"http://{node.network.node_ip}:10248/healthz"):
            found.append("kubelet still answers")
    return found
