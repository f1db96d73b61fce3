"""The Kubernetes profiles: one namespace per run, Kueue admission, one Agent Sandbox per agent.

Uses the official ``kubernetes`` package's asyncio client (``kubernetes.aio``) from anyio's
asyncio backend. See ``docs/kubernetes.md``.
"""

from controller.platform.kubernetes.controller_job import run_controller_job
from controller.platform.kubernetes.kube import Kube, KubeError
from controller.platform.kubernetes.namespace import delete_run_namespace, prepare_run_namespace
from controller.platform.kubernetes.platform import GkePlatform, KindPlatform, KubernetesPlatform
from controller.platform.kubernetes.session import BridgeAddress, KubernetesSession
from controller.platform.kubernetes.settings import KubernetesSettings

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
    "run_controller_job",
]
