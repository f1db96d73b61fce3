"""The Kubernetes profiles: one namespace per run, Kueue admission, one Agent Sandbox per agent.

Uses the official ``kubernetes`` package's asyncio client (``kubernetes.aio``) from anyio's
asyncio backend. See ``docs/kubernetes.md``.
"""

from controller.platforms.kubernetes.kube import Kube, KubeError
from controller.platforms.kubernetes.namespace import delete_run_namespace, prepare_run_namespace
from controller.platforms.kubernetes.platform import GkePlatform, KindPlatform, KubernetesPlatform
from controller.platforms.kubernetes.session import BridgeAddress, KubernetesSession
from controller.platforms.kubernetes.settings import KubernetesSettings

__all__ = [
    "BridgeAddress",
    "GkePlatform",
    "KindPlatform",
    "Kube",
    "KubeError",
    "KubernetesPlatform",
    "KubernetesSession",
    "KubernetesSettings",
    "delete_run_namespace",
    "prepare_run_namespace",
]
