"""The install sequences of ``society cluster up`` and ``cluster down`` for the kind profile.

``up``: cluster, registry, Kueue, Agent Sandbox, images, Temporal, queues, chart, profile file.
``down``: the reverse, removing only what ``up`` recorded that it made.

With ``existing_kubeconfig`` (``--existing-kubeconfig``) the steps that need Docker, kind or
the internet are replaced by their nearest substitutes: the cluster is the one the kubeconfig
names (not created, never deleted), there is no registry (images are imported into each node's
containerd given by ``--node-containerd``, as ``kind load`` does inside a kind node), and Kueue
and Agent Sandbox must already be served (they are checked, not installed).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio

from controller.ops.cluster import addon_sources, images, kind, policy_probe, temporal
from controller.ops.cluster.prerequisites import Programs
from controller.ops.cluster.queue_size import pool_quota
from controller.ops.cluster.steps import Step, StepFailed, StepRunner
from controller.ops.repository import ROOT as REPO
from controller.platforms.kubernetes.api import KubeError, Obj, is_true
from controller.platforms.kubernetes.kube import Kube
from controller.platforms.kubernetes.profile_file import (
    PROFILE_DIR,
    ClusterProfile,
    profile_path,
    read_profile,
    write_profile,
)
from controller.platforms.kubernetes.settings import DEFAULT_CLUSTER_QUEUE
from controller.platforms.kubernetes.warm import WARM_NAMESPACE

CHART = REPO / "helm" / "society-runner"
RELEASE = "society-runner"
SYSTEM_NAMESPACE = "society-system"
"""The chart's release namespace; the in-cluster Temporal runs here too."""
CREDENTIALS_NAMESPACE = "society-credentials"
AGENTS_POOL = {"society.run/pool": "agents"}
"""The agents' node label in ``kind/cluster.yaml``."""
READY_TIMEOUT_S = 300.0
INSTALLED_BY = kind.INSTALLED_BY
TEMPORAL_PODS = f"app.kubernetes.io/name={temporal.NAME}"
PROBE_IMAGE = images.SCRIPTED_IMAGE
"""The NetworkPolicy probe's pods run this image's Python."""


@dataclass
class ClusterOptions:
    artifact_root: Path
    profile: str = "kind"
    existing_kubeconfig: Path | None = None
    context: str | None = None
    agent_nodes: dict[str, str] = field(default_factory=lambda: dict(AGENTS_POOL))
    node_containerd: list[str] = field(default_factory=list)
    ledger_storage_class: str | None = None
    ledger_node_root: str | None = None
    ledger_host_root: str | None = None
    cluster_name: str = kind.CLUSTER_NAME
    node_image: str | None = None
    host_patches: Path | None = None
    addons_from_source: bool = False
    warm_pool: int = 0
    """Sandboxes of the scripted runtime's shape kept warm (``warm``); 0 makes no pool."""

    @property
    def state_dir(self) -> Path:
        return self.artifact_root / PROFILE_DIR

    @property
    def kubeconfig(self) -> Path:
        if self.existing_kubeconfig is not None:
            return self.existing_kubeconfig.resolve()
        return self.state_dir / f"{self.profile}.kubeconfig"


async def _poll(what: str, check: Callable[[], Awaitable[bool]], limit_s: float) -> None:
    """Until ``check`` holds, once a second (an install waits on several kinds of object)."""
    deadline = anyio.current_time() + limit_s
    while anyio.current_time() < deadline:
        if await check():
            return
        await anyio.sleep(1)
    raise StepFailed(f"{what} was not ready after {limit_s:.0f} s", reason="not-ready")


def pod_states(pods: list[Obj]) -> str:
    """What each pod is waiting on, for a step's error (``ErrImageNeverPull``, a crash, ...)."""
    if not pods:
        return "no pod was created (is the namespace's quota or an admission policy refusing it?)"
    states = []
    for pod in pods:
        status = pod.get("status") or {}
        where = (pod.get("spec") or {}).get("nodeName") or "unscheduled"
        details = [status.get("phase", "?")]
        for container in status.get("containerStatuses") or []:
            for state, info in (container.get("state") or {}).items():
                reason = info.get("reason") or state
                details.append(f"{container['name']} {reason}: {info.get('message', '')}".strip())
        for condition in status.get("conditions") or []:
            if condition.get("status") != "True" and condition.get("message"):
                details.append(condition["message"])
        states.append(f"pod {pod['metadata']['name']} on {where}: {'; '.join(details)}")
    return " | ".join(states)


def _helm(programs: Programs, options: ClusterOptions, *args: str) -> str:
    argv = [str(programs.helm), "--kubeconfig", str(options.kubeconfig), *args]
    if options.context:
        argv += ["--kube-context", options.context]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise StepFailed(
            f"helm {args[0]} failed: {done.stderr.strip()[-1200:]}", reason="helm-failed"
        )
    return done.stdout


class ClusterUp:
    """``cluster up``'s steps; ``run`` returns the profile file it wrote."""

    def __init__(self, options: ClusterOptions, programs: Programs, out: TextIO) -> None:
        self.options = options
        self.programs = programs
        self.runner = StepRunner(out)
        previous = read_profile(options.artifact_root, options.profile)
        self.made_cluster = bool(previous and previous.made_cluster)
        self.made_registry = bool(previous and previous.made_registry)
        self.imported: dict[str, list[str]] = dict(previous.imported) if previous else {}
        self.images: dict[str, str] = {}
        self.temporal_address = ""
        self.temporal_ui: str | None = None
        self.temporal_cluster_ip = ""
        self.quota = ("", "")
        self.made_storage_class = bool(previous and previous.made_storage_class)
        self.ledger_storage_class = options.ledger_storage_class
        self.ledger_node_root = options.ledger_node_root
        self.ledger_host_root = options.ledger_host_root
        self.made_network = bool(previous and previous.made_network)
        self.pushed: dict[str, str] = dict(previous.pushed) if previous else {}
        self.addon_build: addon_sources.AddonBuild | None = None
        self.addon_manifests: dict[str, str] = {}
        self.policy_enforced = bool(previous and previous.network_policy_enforced)

    @property
    def existing(self) -> bool:
        return self.options.existing_kubeconfig is not None

    @property
    def host(self) -> kind.KindHost:
        """The kind cluster (not with ``--existing-kubeconfig``)."""
        assert self.programs.kind is not None and self.programs.engine is not None
        return kind.KindHost(
            kind=self.programs.kind,
            engine=self.programs.engine,
            name=self.options.cluster_name,
            node_image=self.options.node_image,
            host_patches=self.options.host_patches,
        )

    def kube(self) -> AbstractAsyncContextManager[Kube]:
        return Kube.connect(kubeconfig=str(self.options.kubeconfig), context=self.options.context)

    async def run(self) -> Path:
        versions = kind.VERSIONS
        steps = [
            *([Step("add-on images (from source)", self.build_addons)]
              if self.options.addons_from_source and not self.existing else []),
            Step("cluster", self.cluster),
            Step("local registry", self.registry),
            Step(f"kueue {versions['KUEUE_VERSION']}", lambda: self.addon("kueue")),
            Step(f"agent sandbox {versions['AGENT_SANDBOX_VERSION']}",
                 lambda: self.addon("agent-sandbox")),
            Step("images", self.build_images),
            Step("networkpolicy enforcement", self.network_policy),
            Step("temporal dev server", self.temporal),
            Step("agents queue size", self.queue_size),
            Step("ledger volumes", self.ledger_volumes),
            Step("chart (queues, credentials namespace, run worker)", self.chart),
            *([Step(f"warm pool of {self.options.warm_pool} scripted sandboxes", self.warm_pool)]
              if self.options.warm_pool else []),
            Step("profile file", self.profile_file),
        ]  # fmt: skip
        await self.runner.run(steps)
        return profile_path(self.options.artifact_root, self.options.profile)

    # ---- steps ----------------------------------------------------------------------------

    async def cluster(self) -> str:
        if self.existing:
            async with self.kube() as kube:
                try:
                    nodes, _ = await kube.list("Node")
                except Exception as exc:  # the client raises many types for one meaning
                    raise StepFailed(
                        f"cannot reach the cluster of {self.options.kubeconfig}: {exc}",
                        reason="cluster-unreachable",
                    ) from exc
            return f"existing cluster of {self.options.kubeconfig} ({len(nodes)} nodes)"
        host = self.host
        self.volumes_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        created = await anyio.to_thread.run_sync(
            lambda: kind.create_cluster(host, self.options.kubeconfig,
                                        host.config(self.volumes_dir))
        )  # fmt: skip
        self.made_cluster = self.made_cluster or created.cluster
        self.made_network = self.made_network or created.network
        return f"{'created' if created.cluster else 'reused'} kind cluster '{host.name}'"

    async def build_addons(self) -> str:
        self.addon_build = await anyio.to_thread.run_sync(addon_sources.build_addons)
        versions = ", ".join(f"{name} {a.version}" for name, a in self.addon_build.addons.items())
        return f"registry, {versions}: images and manifests built from the Go module proxy"

    async def registry(self) -> str:
        if self.existing:
            return "skipped (--existing-kubeconfig: images go into the nodes' containerd)"
        image = kind.REGISTRY_IMAGE if self.addon_build is None else self.addon_build.registry_image
        made = kind.start_registry(self.host, image)
        self.made_registry = self.made_registry or made
        async with self.kube() as kube:
            await kube.apply(kind.local_registry_hosting())
        return f"{'started' if made else 'reused'} {kind.REGISTRY_NAME} at {kind.REGISTRY_HOST}"

    async def addon(self, addon: str) -> str:
        if self.existing:
            kind_name = "ClusterQueue" if addon == "kueue" else "Sandbox"
            async with self.kube() as kube:
                try:
                    await kube.list(kind_name)
                except KubeError as exc:
                    raise StepFailed(
                        f"the existing cluster does not serve {kind_name} ({exc}); install "
                        f"{kind.ADDONS[addon][0]} there first",
                        reason="addon-missing",
                    ) from None
            return "already served by the cluster (checked, not installed)"
        assert self.programs.kubectl is not None and self.programs.engine is not None
        manifest = None
        if self.addon_build is not None:
            manifest = str(addon_sources.pushed_manifest(
                self.programs.engine, kind.REGISTRY_HOST, addon,
                self.addon_build.addons[addon], self.options.state_dir / "addons",
            ))  # fmt: skip
            self.addon_manifests[addon] = manifest
        kubectl, kubeconfig = self.programs.kubectl, self.options.kubeconfig
        return await anyio.to_thread.run_sync(
            lambda: kind.apply_addon(kubectl, kubeconfig, addon, manifest)
        )

    async def build_images(self) -> str:
        built = await anyio.to_thread.run_sync(images.build_images)
        if not self.existing:
            engine, before = self.programs.engine, dict(self.pushed)
            assert engine is not None
            self.images, self.pushed = await anyio.to_thread.run_sync(
                lambda: images.push_to_registry(engine, kind.REGISTRY_HOST, built, before)
            )
            fresh = len(set(self.pushed.values()) - set(before.values()))
            return (f"built {len(self.images)}; pushed {fresh} new to {kind.REGISTRY_HOST} "
                    f"({len(set(self.pushed.values())) - fresh} there already)")  # fmt: skip
        self.images = dict(built.images)
        if not self.options.node_containerd:
            return f"built {len(built.images)}; not imported (no --node-containerd given)"
        assert self.programs.ctr is not None
        counts = []
        for socket in self.options.node_containerd:
            added = images.import_into_containerd(self.programs.ctr, socket, built)
            known = set(self.imported.get(socket, []))
            self.imported[socket] = sorted(known | set(added))
            counts.append(len(added))
        return (
            f"built {len(built.images)}; imported {sum(counts)} new into "
            f"{len(counts)} node(s) ({len(built.images) * len(counts) - sum(counts)} present)"
        )

    async def network_policy(self) -> str:
        if self.existing:
            return "not checked (--existing-kubeconfig: the cluster's own)"
        if self.policy_enforced:
            return "enforced (checked by an earlier `up`)"
        image = self.images.get(PROBE_IMAGE)
        if image is None:
            raise StepFailed(f"the image map has no {PROBE_IMAGE}", reason="image-missing")
        async with self.kube() as kube:
            outcome = await policy_probe.check_enforcement(kube, image, self.options.agent_nodes)
        self.policy_enforced = True
        return outcome

    async def temporal(self) -> str:
        image = self.images.get(temporal.IMAGE)
        if image is None:
            raise StepFailed(
                f"the image map has no {temporal.IMAGE}; rebuild the images", reason="image-missing"
            )
        async with self.kube() as kube:
            await kube.apply(
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": SYSTEM_NAMESPACE, "labels": INSTALLED_BY}}
            )  # fmt: skip
            before = await kube.get("Deployment", temporal.NAME, SYSTEM_NAMESPACE)
            for obj in temporal.temporal_objects(SYSTEM_NAMESPACE, image):
                await kube.apply(obj)

            async def ready() -> bool:
                found = await kube.get("Deployment", temporal.NAME, SYSTEM_NAMESPACE)
                status = (found or {}).get("status") or {}
                current = status.get("observedGeneration") == (found or {}).get("metadata", {}).get(
                    "generation"
                )
                return (
                    current and temporal.available(found) and not status.get("unavailableReplicas")
                )

            try:
                await _poll(
                    f"Deployment {SYSTEM_NAMESPACE}/{temporal.NAME}", ready, READY_TIMEOUT_S
                )
            except StepFailed as failed:
                pods, _ = await kube.list("Pod", SYSTEM_NAMESPACE, label_selector=TEMPORAL_PODS)
                logs = f"`kubectl -n {SYSTEM_NAMESPACE} logs deploy/{temporal.NAME} --previous`"
                raise StepFailed(
                    f"{failed}; {pod_states(pods)} ({logs} shows a crash's cause)",
                    reason=failed.reason,
                ) from None
            service = await kube.get("Service", temporal.NAME, SYSTEM_NAMESPACE)
            assert service is not None
            self.temporal_cluster_ip = str(service["spec"]["clusterIP"])
            if self.existing:
                self.temporal_address = await self._node_port_address(kube)
            else:
                self.temporal_address, self.temporal_ui = (
                    temporal.KIND_HOST_GRPC,
                    temporal.KIND_HOST_UI,
                )
        await self._probe_temporal()
        state = "unchanged" if before and temporal.available(before) else "started"
        inside = f"{self.temporal_cluster_ip}:{temporal.GRPC_PORT}"
        return f"{state}; pods use {inside}, this machine {self.temporal_address}"

    async def _node_port_address(self, kube: Kube) -> str:
        """The NodePort on the InternalIP of the node that runs the server."""
        pods, _ = await kube.list("Pod", SYSTEM_NAMESPACE, label_selector=TEMPORAL_PODS)
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        node = await kube.get("Node", running[0]["spec"]["nodeName"]) if running else None
        address = temporal.node_address(node) if node else None
        if address is None:
            raise StepFailed(
                "the Temporal pod's node has no InternalIP", reason="temporal-unreachable"
            )
        self.temporal_ui = f"http://{address}:{temporal.UI_NODE_PORT}"
        return f"{address}:{temporal.GRPC_NODE_PORT}"

    async def _probe_temporal(self) -> None:
        from controller.lifecycle.server import (
            TemporalEndpoint,
            TemporalUnavailable,
            connect,
        )

        endpoint = TemporalEndpoint(self.temporal_address, "default", self.temporal_ui)
        last: Exception | None = None
        for _ in range(30):  # the NodePort's rules can trail the pod's readiness
            try:
                client = await connect(endpoint)
                await client.count_workflows()
                return
            except (TemporalUnavailable, RuntimeError) as exc:
                last = exc
                await anyio.sleep(1)
        raise StepFailed(
            f"the in-cluster Temporal does not answer at {self.temporal_address}: {last}",
            reason="temporal-unreachable",
        )

    @property
    def volumes_dir(self) -> Path:
        """kind: where this machine sees the nodes' local-path volumes (the ledgers)."""
        return self.options.state_dir / f"{self.options.profile}-volumes"

    async def ledger_volumes(self) -> str:
        if self.existing:
            name = self.ledger_storage_class
            if name is None:
                return ("none (no --ledger-storage-class): each run's ledger goes with its "
                        "controller's pod")  # fmt: skip
            async with self.kube() as kube:
                found = await kube.get("StorageClass", name)
            if found is None:
                raise StepFailed(
                    f"the cluster has no StorageClass {name}; create one with reclaimPolicy "
                    "Retain, or leave --ledger-storage-class out",
                    reason="storage-class-missing",
                )
            if found.get("reclaimPolicy") != "Retain":
                raise StepFailed(
                    f"StorageClass {name} has reclaimPolicy {found.get('reclaimPolicy')}: a run's "
                    "ledger volume would be deleted with its namespace; use one with Retain",
                    reason="storage-class-deletes",
                )
            home = self.ledger_host_root or "not copied home (no --ledger-volumes)"
            return f"StorageClass {name} (checked, not made); copied home from {home}"
        async with self.kube() as kube:
            before = await kube.get("StorageClass", kind.LEDGER_STORAGE_CLASS)
            await kube.apply(kind.ledger_storage_class())
        self.made_storage_class = True
        self.ledger_storage_class = kind.LEDGER_STORAGE_CLASS
        self.ledger_node_root, self.ledger_host_root = kind.LOCAL_PATH_DIR, str(self.volumes_dir)
        state = "unchanged" if before else "created"
        return (f"StorageClass {kind.LEDGER_STORAGE_CLASS} {state} (Retain); the nodes' "
                f"{kind.LOCAL_PATH_DIR} is {self.volumes_dir}")  # fmt: skip

    async def queue_size(self) -> str:
        selector = self.options.agent_nodes
        async with self.kube() as kube:
            nodes, _ = await kube.list("Node")
        cpu, memory, count = pool_quota(nodes, selector)
        labels = ",".join(f"{k}={v}" for k, v in selector.items())
        if not count:
            raise StepFailed(
                f"no node is labelled {labels}; label the agents' nodes (kind/cluster.yaml "
                "does) or pass --agent-nodes KEY=VALUE",
                reason="agents-pool-empty",
            )
        self.quota = (cpu, memory)
        return f"cpu {cpu}, memory {memory}: {count} node(s) labelled {labels}"

    async def chart(self) -> str:
        worker = self.images.get(images.WORKER_IMAGE)
        if worker is None:
            raise StepFailed(f"the image map has no {images.WORKER_IMAGE}", reason="image-missing")
        repository, digest = worker.split("@", 1)
        values = {
            "worker": {"image": {"repository": repository, "digest": digest}},
            "temporal": {"address": f"{self.temporal_cluster_ip}:{temporal.GRPC_PORT}",
                         "namespace": "default"},
            "agentQueue": {"cpu": self.quota[0], "memory": self.quota[1]},
            "agents": {"nodeSelector": self.options.agent_nodes},
            "credentialsNamespace": CREDENTIALS_NAMESPACE,
        }  # fmt: skip
        values_file = self.options.state_dir / f"{self.options.profile}-values.json"
        values_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        values_file.write_text(json.dumps(values, indent=2) + "\n")
        await anyio.to_thread.run_sync(
            lambda: _helm(
                self.programs, self.options, "upgrade", "--install", RELEASE, str(CHART),
                "--namespace", SYSTEM_NAMESPACE, "--values", str(values_file),
                # the run roles an administrator's earlier out-of-cluster run installed
                # (namespace.ensure_run_roles) are the chart's own objects: adopt them, with
                # their labels (server-side apply: a field of another manager conflicts)
                "--take-ownership", "--force-conflicts",
                "--wait", "--timeout", f"{int(READY_TIMEOUT_S)}s",
            )
        )  # fmt: skip
        async with self.kube() as kube:

            async def active() -> bool:
                return is_true(await kube.get("ClusterQueue", DEFAULT_CLUSTER_QUEUE), "Active")

            await _poll(f"ClusterQueue {DEFAULT_CLUSTER_QUEUE}", active, 120)
        revision = json.loads(_helm(self.programs, self.options, "status", RELEASE,
                                    "-n", SYSTEM_NAMESPACE, "-o", "json"))["version"]  # fmt: skip
        return f"release {RELEASE} revision {revision}; ClusterQueue {DEFAULT_CLUSTER_QUEUE} active"

    async def warm_pool(self) -> str:
        """A SandboxWarmPool of the scripted runtime's shape (its image pinned through the image
        map) on the agents' nodes, waited ready."""
        from controller.agents import scripted
        from controller.platforms.kubernetes import warm

        image = self.images.get(PROBE_IMAGE)
        if image is None:
            raise StepFailed(f"the image map has no {PROBE_IMAGE}", reason="image-missing")
        descriptor = scripted(image=image)
        size = self.options.warm_pool
        placement = {"nodeSelector": dict(self.options.agent_nodes)}
        async with self.kube() as kube:
            for manifest in warm.pool_manifests(descriptor, size, placement):
                await kube.apply(manifest)
            name = warm.pool_name(descriptor)

            async def ready() -> bool:
                found = await kube.get("SandboxWarmPool", name, warm.WARM_NAMESPACE) or {}
                return int((found.get("status") or {}).get("readyReplicas") or 0) >= size

            await _poll(f"SandboxWarmPool {name}", ready, READY_TIMEOUT_S)
        return f"{warm.WARM_NAMESPACE}/{name}: {size} ready"

    def operator_key(self) -> tuple[Path, bool]:
        """The profile's operator key (made once, 0600) and its public key beside it."""
        from ledger.signing import SigningKey

        key = self.options.state_dir / f"{self.options.profile}-operator.pem"
        if key.exists():
            return key, False
        made = SigningKey.generate()
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = key.with_suffix(".tmp")
        temporary.write_bytes(made.private_pem())
        temporary.chmod(0o600)
        temporary.rename(key)
        key.with_suffix(".pub").write_text(made.public_key + "\n")
        return key, True

    async def profile_file(self) -> str:
        key, made_key = self.operator_key()
        profile = ClusterProfile(
            profile=self.options.profile,
            kubeconfig=str(self.options.kubeconfig),
            context=self.options.context,
            cluster_queue=DEFAULT_CLUSTER_QUEUE,
            images=self.images,
            temporal_address=self.temporal_address,
            temporal_ui_url=self.temporal_ui,
            agent_node_selector=self.options.agent_nodes,
            existing_cluster=self.existing,
            made_cluster=self.made_cluster,
            made_registry=self.made_registry,
            cluster_name=self.options.cluster_name,
            provider=None
            if self.existing or self.programs.engine is None
            else self.programs.engine.name,
            made_network=self.made_network,
            pushed=self.pushed,
            addon_manifests=self.addon_manifests,
            network_policy_enforced=self.policy_enforced,
            imported=self.imported,
            ledger_storage_class=self.ledger_storage_class,
            ledger_node_root=self.ledger_node_root,
            ledger_host_root=self.ledger_host_root,
            made_storage_class=self.made_storage_class,
            signing_key=str(key),
        )
        path = write_profile(self.options.artifact_root, profile)
        signing = f"{'made' if made_key else 'kept'} operator key {key} (verify with --trusted-key "
        return f"{path}; {signing}{key.with_suffix('.pub')})"


class ClusterDown:
    """``cluster down``: removes what the profile file says ``up`` made, then the file."""

    def __init__(
        self, options: ClusterOptions, programs: Programs, profile: ClusterProfile, out: TextIO
    ) -> None:
        self.options = options
        self.programs = programs
        self.profile = profile
        self.runner = StepRunner(out)

    async def run(self) -> None:
        steps = [
            Step("chart", self.chart),
            Step("temporal and system namespace", self.system_namespace),
            Step("imported images", self.images),
            Step("kueue and agent sandbox", self.addons),
            Step("kind cluster and registry", self.cluster),
            Step("profile file", self.profile_file),
        ]
        await self.runner.run(steps)

    async def chart(self) -> str:
        listed = _helm(self.programs, self.options, "list", "-n", SYSTEM_NAMESPACE, "-q")
        if RELEASE not in listed.split():
            return "not installed"
        await anyio.to_thread.run_sync(
            lambda: _helm(self.programs, self.options, "uninstall", RELEASE, "-n",
                          SYSTEM_NAMESPACE, "--wait", "--timeout", "300s")
        )  # fmt: skip
        return f"uninstalled {RELEASE}"

    async def system_namespace(self) -> str:
        async with Kube.connect(
            kubeconfig=self.profile.kubeconfig, context=self.profile.context
        ) as kube:
            deleted = [name for name in (SYSTEM_NAMESPACE, CREDENTIALS_NAMESPACE, WARM_NAMESPACE)
                       if await kube.delete("Namespace", name)]  # fmt: skip

            async def gone() -> bool:
                for name in (SYSTEM_NAMESPACE, CREDENTIALS_NAMESPACE, WARM_NAMESPACE):
                    if await kube.get("Namespace", name) is not None:
                        return False
                return True

            await _poll("the namespaces' deletion", gone, READY_TIMEOUT_S)
        return f"deleted {', '.join(deleted)}" if deleted else "already gone"

    async def images(self) -> str:
        if not self.profile.imported:
            return "none imported"
        if self.programs.ctr is None:
            raise StepFailed(
                "ctr is needed to remove imported images", reason="prerequisite-missing"
            )
        removed = sum(
            images.remove_from_containerd(self.programs.ctr, socket, refs)
            for socket, refs in self.profile.imported.items()
        )
        return f"removed {removed} from {len(self.profile.imported)} node(s)"

    async def addons(self) -> str:
        if self.profile.existing_cluster:
            return "kept (the existing cluster's own)"
        if self.profile.made_cluster:
            return "go with the cluster"
        assert self.programs.kubectl is not None
        for addon in kind.ADDONS:
            kind.delete_addon(self.programs.kubectl, Path(self.profile.kubeconfig), addon,
                              self.profile.addon_manifests.get(addon))  # fmt: skip
        return "deleted"

    async def cluster(self) -> str:
        if self.profile.existing_cluster:
            return "kept (not made by cluster up)"
        assert self.programs.kind is not None and self.programs.engine is not None
        host = kind.KindHost(kind=self.programs.kind, engine=self.programs.engine,
                             name=self.profile.cluster_name)  # fmt: skip
        done = []
        if self.profile.made_registry:
            kind.remove_registry(self.programs.engine)
            done.append(f"removed {kind.REGISTRY_NAME}")
        if self.profile.made_cluster:
            kubeconfig = Path(self.profile.kubeconfig)
            await anyio.to_thread.run_sync(lambda: kind.delete_cluster(host, kubeconfig))
            done.append(f"deleted kind cluster '{host.name}'")
        if self.profile.made_network and kind.remove_network(host):
            done.append(f"removed network '{kind.NETWORK}'")
        return "; ".join(done) or "kept (not made by cluster up)"

    async def profile_file(self) -> str:
        state = self.options.state_dir
        path = profile_path(self.options.artifact_root, self.options.profile)
        for name in (path, state / f"{self.options.profile}-values.json",
                     state / f"{self.options.profile}.kubeconfig",
                     state / f"{self.profile.cluster_name}-kind-config.yaml",
                     *map(Path, self.profile.addon_manifests.values())):  # fmt: skip
            name.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (state / "addons").rmdir()
        try:
            state.rmdir()
        except OSError:
            pass  # another profile's file is still there, or the kept ledger volumes
        kept = []
        if self.profile.signing_key:
            public = Path(self.profile.signing_key).with_suffix(".pub")
            kept.append(f"the operator key and {public} (its ledgers verify with it)")
        if self.profile.made_storage_class and self.profile.ledger_host_root:
            kept.append(f"the ledgers' volumes in {self.profile.ledger_host_root}")
        return f"removed {path}" + (f"; kept {' and '.join(kept)}" if kept else "")
