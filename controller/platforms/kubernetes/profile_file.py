"""The one profile file ``society cluster up`` writes under the artifact root, and
``society run --profile kind`` reads when the environment does not say otherwise.

It holds the settings of the cluster it made (kubeconfig, queue, image map, Temporal's address)
and what ``cluster down`` must remove (whether it created the kind cluster and the registry,
which images it imported). Environment variables always win over it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import controller.settings as s
from controller.errors import OpsError

PROFILE_DIR = ".cluster"
"""Under the artifact root: the profile file and the kubeconfig ``cluster up`` wrote."""
LEDGER_CLAIM = "ledger"
"""The name of each run's ledger claim in its namespace."""
GROUPS = {
    "TEMPORAL_ADDRESS": ("TEMPORAL_NAMESPACE", "TEMPORAL_UI_URL"),
    s.KUBECONFIG.name: (s.KUBE_CONTEXT.name,),
    s.LEDGER_PVC.name: (
        s.LEDGER_STORAGE_CLASS.name,
        s.LEDGER_NODE_ROOT.name,
        s.LEDGER_HOST_ROOT.name,
    ),
}
"""A variable the user set keeps the file's related settings out."""


class ProfileFileError(OpsError):
    """The profile file exists but cannot be read; ``reason`` is ``profile-file-invalid``."""

    reason = "profile-file-invalid"


class ClusterProfile(BaseModel):
    """What ``cluster up`` made and the settings a run on it needs."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    profile: str
    kubeconfig: str
    context: str | None = None
    cluster_queue: str = Field(alias="clusterQueue")
    images: dict[str, str]
    """Image name -> digest-pinned reference (``SOCIETY_IMAGE_MAP``'s shape)."""
    temporal_address: str = Field(alias="temporalAddress")
    temporal_namespace: str = Field(default="default", alias="temporalNamespace")
    temporal_ui_url: str | None = Field(default=None, alias="temporalUiUrl")
    agent_node_selector: dict[str, str] = Field(default_factory=dict, alias="agentNodeSelector")
    existing_cluster: bool = Field(alias="existingCluster")
    """``--existing-kubeconfig``: the cluster is not ours to delete."""
    made_cluster: bool = Field(default=False, alias="madeCluster")
    made_registry: bool = Field(default=False, alias="madeRegistry")
    cluster_name: str = Field(default="society", alias="clusterName")
    """The kind cluster's name (``--name``)."""
    provider: str | None = None
    """kind's node provider, ``docker`` or ``podman`` (``--provider``)."""
    made_network: bool = Field(default=False, alias="madeNetwork")
    """``cluster up`` made kind's container network (``down`` removes it once unused)."""
    pushed: dict[str, str] = Field(default_factory=dict)
    """Source image reference -> what ``cluster up`` pushed to the local registry."""
    addon_manifests: dict[str, str] = Field(default_factory=dict, alias="addonManifests")
    network_policy_enforced: bool = Field(default=False, alias="networkPolicyEnforced")
    """``cluster up``'s probe saw a default-deny policy refuse a connection (checked once)."""
    """``--addons-from-source``: add-on -> the manifest file ``cluster up`` applied."""
    imported: dict[str, list[str]] = Field(default_factory=dict)
    """containerd socket -> the image references ``cluster up`` imported there."""
    ledger_storage_class: str | None = Field(default=None, alias="ledgerStorageClass")
    """Each run's ledger volume's class (``Retain``); none: the ledger goes with its pod."""
    ledger_node_root: str | None = Field(default=None, alias="ledgerNodeRoot")
    ledger_host_root: str | None = Field(default=None, alias="ledgerHostRoot")
    """Where the nodes keep those volumes, and where this machine sees them (copy home)."""
    made_storage_class: bool = Field(default=False, alias="madeStorageClass")
    signing_key: str | None = Field(default=None, alias="signingKey")
    """The operator key file runs on this cluster sign with (its ``.pub`` beside it)."""

    def environment(self) -> dict[str, str]:
        """The variables a run on this cluster reads (``KubernetesSettings``, Temporal)."""
        env = {
            s.KUBECONFIG.name: self.kubeconfig,
            s.CLUSTER_QUEUE.name: self.cluster_queue,
            s.IMAGE_MAP.name: json.dumps({"images": self.images}, sort_keys=True),
            "TEMPORAL_ADDRESS": self.temporal_address,
            "TEMPORAL_NAMESPACE": self.temporal_namespace,
        }
        if self.context:
            env[s.KUBE_CONTEXT.name] = self.context
        if self.signing_key:
            env[s.SIGNING_KEY.name] = self.signing_key
        if self.ledger_storage_class:
            env[s.LEDGER_PVC.name] = LEDGER_CLAIM
            env[s.LEDGER_STORAGE_CLASS.name] = self.ledger_storage_class
            if self.ledger_node_root and self.ledger_host_root:
                env[s.LEDGER_NODE_ROOT.name] = self.ledger_node_root
                env[s.LEDGER_HOST_ROOT.name] = self.ledger_host_root
        if self.temporal_ui_url:
            env["TEMPORAL_UI_URL"] = self.temporal_ui_url
        if self.agent_node_selector:
            selector = ",".join(f"{k}={v}" for k, v in sorted(self.agent_node_selector.items()))
            env[s.AGENT_NODE_SELECTOR.name] = selector
        return env


def profile_path(artifact_root: Path, profile: str) -> Path:
    return artifact_root / PROFILE_DIR / f"{profile}.json"


def write_profile(artifact_root: Path, profile: ClusterProfile) -> Path:
    """Write atomically (0600: it names the kubeconfig); returns the path."""
    path = profile_path(artifact_root, profile.profile)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(profile.model_dump_json(by_alias=True, indent=2) + "\n")
    temporary.chmod(0o600)
    temporary.rename(path)
    return path


def read_profile(artifact_root: Path, profile: str) -> ClusterProfile | None:
    """The profile file, or ``None`` when ``cluster up`` has not written one."""
    path = profile_path(artifact_root, profile)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return ClusterProfile.model_validate_json(text)
    except ValueError as exc:
        raise ProfileFileError(
            f"{path} is not a profile file `society cluster up` wrote ({exc}); run "
            f"`society cluster up --profile {profile}` again to rewrite it"
        ) from None


def apply_profile(
    artifact_root: Path, profile: str, environ: MutableMapping[str, str]
) -> Mapping[str, str]:
    """Fill in the settings of ``cluster up``'s profile file that ``environ`` lacks; returns
    the ones it filled in (none without a profile file). A variable already set always wins,
    and with it its group: a ``TEMPORAL_ADDRESS`` of the user's takes no namespace or UI from
    the file, a ``SOCIETY_KUBECONFIG`` no context."""
    env = environ
    found = read_profile(artifact_root, profile)
    if found is None:
        return {}
    settings = found.environment()
    for leader, followers in GROUPS.items():
        if env.get(leader):
            for name in followers:
                settings.pop(name, None)
    filled = {k: v for k, v in settings.items() if not env.get(k)}
    env.update(filled)
    return filled
