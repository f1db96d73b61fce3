"""Profiles' platforms: ``local`` (child processes); ``kind``, ``gke`` and ``kubernetes`` (any
cluster reached through a kubeconfig; see docs/kubernetes.md).

The only places that spawn processes or import ``kubernetes`` / ``temporalio``; each platform
module loads only when a run asks for its profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controller.run.platform import Platform

PROFILES = ("local", "kind", "gke", "kubernetes")
CLUSTER_PROFILES = ("kind", "gke", "kubernetes")


def platform_for(profile: str) -> Platform:
    """The platform that runs ``profile``; raises ``PlatformError`` for an unknown or absent one."""
    from controller.run.platform import PlatformError

    if profile == "local":
        from controller.platform.local import LocalPlatform

        return LocalPlatform()
    if profile in CLUSTER_PROFILES:
        try:
            from controller.platform.kubernetes import KubernetesPlatform
        except ImportError as exc:
            raise PlatformError(
                f"profile {profile!r} needs the Kubernetes platform, which this build lacks "
                f"({exc}); use --profile local",
                reason="profile-unavailable",
            ) from None
        platform: Platform = KubernetesPlatform.for_profile(profile)
        return platform
    raise PlatformError(
        f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}",
        reason="unknown-profile",
    )
