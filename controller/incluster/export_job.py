"""A cluster run's export to the ledger bucket, done by a Job of its own in the run's namespace.

The controller Job writes the run directory to the run's ledger claim (``SOCIETY_LEDGER_PVC``).
At cleanup, with ``SOCIETY_LEDGER_EXPORT`` set, the run worker exports it from there
(``export_from_claim``), before the namespace goes:

* **Why a Job.** The worker's pod cannot mount a claim of another namespace, and the controller
  Job runs the researcher's module, which should hold no bucket credential. The export Job
  runs only this module's ``main`` from the digest-pinned controller image, after the
  controller's pod has ended, with the claim mounted read-only.
* **Identity.** The worker acts as the ledger writer (Workload Identity). It narrows its own
  credentials to this run's objects (``gcs_ledger.export_boundary``: create and read objects
  under ``gs://BUCKET/<run id>/``, nothing else, at most an hour) and hands that token to the
  export Job alone, as the per-run Secret ``society-export-token``. The pod mounts no
  service-account token. No Workload Identity binding names a per-run ServiceAccount, so none
  is needed. Against an emulator (``STORAGE_EMULATOR_HOST``) there is no token to mint (no
  Security Token Service runs here): the Job gets the emulator's address and no Secret.
* **Egress.** The run's default-deny NetworkPolicy holds. ``society-ledger-export`` lets the
  export pod reach DNS and HTTPS (GCS; not the metadata server), or only the emulator's address.
* **Result.** The pod writes its ``ExportReceipt``, or its export error, as its termination
  message; the worker reads it and deletes the Job and the token. A failed export raises
  ``LedgerExportError``; ``export-failed`` is retried by Temporal with cleanup, and the next
  attempt skips what an earlier one exported.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from controller.incluster.access import ARTIFACT_ROOT, RESULT_PATH
from controller.incluster.controller_job import JobWatch
from controller.platforms.kubernetes.api import KubeError
from controller.platforms.kubernetes.kube import Kube, Obj, condition, is_true
from controller.platforms.kubernetes.objects import (
    MANAGED_BY,
    OWNER,
    ROLE_LABEL,
    manifest,
    owned,
    restricted_container,
    restricted_pod,
    run_metadata,
    run_secret,
)
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.settings import RESULT_PATH as RESULT_PATH_VARIABLE
from controller.settings import current
from controller.stores.gcs import (
    EMULATOR_ENV,
    TOKEN_FILE_ENV,
    ExportReceipt,
    LedgerExportError,
    downscoped_token,
    split_url,
)

EXPORT_JOB = "society-ledger-export"
EXPORT_POLICY = "society-ledger-export"
TOKEN_SECRET = "society-export-token"
TOKEN_DIR = "/var/run/society/export-token"
TOKEN_KEY = "token"
ROLE = "ledger-export"
CONTAINER = "export"
METADATA_SERVER = "169.254.169.254/32"
EXPORT_LIMIT_S = 300.0
"""How long the worker waits for one export Job, from its creation to its pod's exit."""

Mint = Callable[[str, str], str]
"""``(bucket, prefix) -> access token`` for one run's export (``downscoped_token``)."""


def token_secret(run_id: str, token: str) -> Obj:
    """The export Job's access token, immutable; only the worker writes it, nobody reads it
    through the API (the worker may create and delete Secrets, never get them)."""
    return run_secret(run_id, TOKEN_SECRET, {TOKEN_KEY: token.encode()}, **{ROLE_LABEL: ROLE})


def _emulator_peer(emulator: str) -> tuple[dict[str, Any], int]:
    parts = urlsplit(emulator if "://" in emulator else f"http://{emulator}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        address = ipaddress.ip_address(parts.hostname or "")
        cidr = f"{address}/{address.max_prefixlen}"
    except ValueError:
        cidr = "0.0.0.0/0"  # a name: its address is not known here
    return {"ipBlock": {"cidr": cidr}}, port


def export_policy(run_id: str, emulator: str | None) -> Obj:
    """Egress for the export pod only: DNS and HTTPS, except the metadata server (GCS); or
    only the emulator's address and port. No ingress."""
    dns = {"ports": [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]}
    if emulator:
        peer, port = _emulator_peer(emulator)
        egress = [dns, {"to": [peer], "ports": [{"protocol": "TCP", "port": port}]}]
    else:
        anywhere = {"ipBlock": {"cidr": "0.0.0.0/0", "except": [METADATA_SERVER]}}
        egress = [dns, {"to": [anywhere], "ports": [{"protocol": "TCP", "port": 443}]}]
    spec = {
        "podSelector": {"matchLabels": {ROLE_LABEL: ROLE}},
        "policyTypes": ["Ingress", "Egress"],
        "egress": egress,
    }
    return manifest("NetworkPolicy", run_metadata(run_id, EXPORT_POLICY), spec=spec)


def export_job(
    run_id: str,
    *,
    image: str,
    claim: str,
    destination: str,
    token: bool,
    emulator: str | None,
    node_selector: dict[str, str] | None = None,
    deadline_s: int = int(EXPORT_LIMIT_S),
) -> Obj:
    """The export, once: the run directory on ``claim`` (read-only) to ``destination``."""
    labels = {**MANAGED_BY, "society.run/id": run_id, ROLE_LABEL: ROLE}
    env = [{"name": "HOME", "value": "/tmp"}]
    mounts: list[dict[str, Any]] = [
        {"name": "artifacts", "mountPath": ARTIFACT_ROOT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "artifacts", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if token:
        env.append({"name": TOKEN_FILE_ENV, "value": f"{TOKEN_DIR}/{TOKEN_KEY}"})
        mounts.append({"name": "token", "mountPath": TOKEN_DIR, "readOnly": True})
        volumes.append(
            {"name": "token", "secret": {"secretName": TOKEN_SECRET, "defaultMode": 0o440}}
        )
    if emulator:
        env.append({"name": EMULATOR_ENV, "value": emulator})
    container = {
        "name": CONTAINER,
        "image": image,
        "command": ["python3", "-m", "controller.incluster.export_job"],
        "args": [f"{ARTIFACT_ROOT}/{run_id}", destination],
        "env": env,
        "terminationMessagePath": RESULT_PATH,
        "terminationMessagePolicy": "File",
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": restricted_container(),
        "volumeMounts": mounts,
    }
    pod = {
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        **({"nodeSelector": dict(node_selector)} if node_selector else {}),
        "securityContext": restricted_pod(),  # fsGroup: the 0440 token Secret
        "containers": [container],
        "volumes": volumes,
    }
    spec = {
        "backoffLimit": 0,  # a failed export is retried by the worker, as a new Job
        "activeDeadlineSeconds": deadline_s,
        "template": {"metadata": {"labels": labels}, "spec": pod},
    }
    return manifest("Job", run_metadata(run_id, EXPORT_JOB, **{ROLE_LABEL: ROLE}), spec=spec)


async def export_from_claim(
    settings: KubernetesSettings,
    run_id: str,
    destination: str,
    *,
    image: str,
    phase: Callable[[str], None],
    mint: Mint = downscoped_token,
    limit_s: float = EXPORT_LIMIT_S,
) -> ExportReceipt | None:
    """Export the run directory on the run's ledger claim to ``destination/<run id>/`` with an
    export Job; ``None`` when the run has no claim (its controller never started)."""
    assert settings.ledger_claim is not None
    bucket, prefix = split_url(destination)
    prefix = f"{prefix}{run_id}/"
    url = f"gs://{bucket}/{prefix}"
    emulator = current().get(EMULATOR_ENV)
    async with Kube.of(settings) as kube:
        if await kube.get("PersistentVolumeClaim", settings.ledger_claim, run_id) is None:
            return None
        owner = await kube.get("ConfigMap", OWNER, run_id)
        if owner is None:
            raise LedgerExportError(
                f"namespace {run_id} has no {OWNER} ConfigMap; the export cannot be owned",
                reason="export-failed",
            )
        await _remove(kube, run_id)  # an earlier attempt's Job and token
        if emulator is None:
            token = await anyio.to_thread.run_sync(mint, bucket, prefix)
            await kube.create(owned(token_secret(run_id, token), owner))
        await _create_or_keep(kube, owned(export_policy(run_id, emulator), owner))
        job = export_job(
            run_id,
            image=image,
            claim=settings.ledger_claim,
            destination=url,
            token=emulator is None,
            emulator=emulator,
            node_selector=settings.controller_node_selector,
            deadline_s=int(limit_s),
        )
        phase(f"cleanup: exporting the run to {url} (Job {run_id}/{EXPORT_JOB})")
        await kube.create(owned(job, owner))
        try:
            with anyio.fail_after(limit_s + 30):
                return await ExportWatch(kube, run_id).outcome()
        except TimeoutError:
            raise LedgerExportError(
                f"the export Job {run_id}/{EXPORT_JOB} did not finish within {limit_s + 30:g} s; "
                "the export is unfinished and is retried with cleanup",
                reason="export-failed",
            ) from None
        finally:
            with anyio.CancelScope(shield=True):
                await _remove(kube, run_id)


async def _create_or_keep(kube: Kube, obj: Obj) -> None:
    try:
        await kube.create(obj)
    except KubeError as error:
        if error.status != 409:
            raise


async def _remove(kube: Kube, run_id: str, limit_s: float = 120.0) -> None:
    """The export Job (its pod first: foreground) and the token; idempotent. If the pod outlasts
    ``limit_s``, the next attempt's create finds the Job and fails, and cleanup retries."""
    await kube.delete("Job", EXPORT_JOB, run_id, propagation="Foreground")
    await kube.delete("Secret", TOKEN_SECRET, run_id)
    with anyio.move_on_after(limit_s):
        await ExportWatch(kube, run_id).gone()


class ExportWatch(JobWatch):
    """A watch on the export Job and its pod."""

    def __init__(self, kube: Kube, run_id: str) -> None:
        super().__init__(kube, run_id, f"{ROLE_LABEL}={ROLE}")

    async def gone(self) -> None:
        await self._until(lambda: True if not self.jobs.objects and not self.pods.objects else None)

    async def outcome(self) -> ExportReceipt:
        ended: ExportReceipt | LedgerExportError = await self._until(self._ended)
        if isinstance(ended, ExportReceipt):
            return ended
        raise ended

    def _ended(self) -> ExportReceipt | LedgerExportError | None:
        for pod in self.pods.objects.values():
            found = _reported(pod)
            if found is not None:
                return found
        job = self.jobs.objects.get(EXPORT_JOB)
        if job is not None and is_true(job, "Failed"):
            why = condition(job, "Failed") or {}
            return LedgerExportError(
                f"the export Job {self.run_id}/{EXPORT_JOB} failed without a report "
                f"({why.get('reason')}: {why.get('message') or ''}); the export is unfinished "
                "and is retried with cleanup",
                reason="export-failed",
            )
        return None


def _reported(pod: Obj) -> ExportReceipt | LedgerExportError | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") != CONTAINER or not terminated:
            continue
        try:
            report = json.loads(terminated.get("message") or "")
        except ValueError:
            report = None
        if isinstance(report, dict) and isinstance(report.get("receipt"), dict):
            return ExportReceipt(**report["receipt"])
        if isinstance(report, dict) and isinstance(report.get("error"), dict):
            error = report["error"]
            return LedgerExportError(str(error["message"]), reason=str(error["reason"]))
        return LedgerExportError(
            f"the export pod {pod['metadata']['name']} exited {terminated.get('exitCode')} "
            f"({terminated.get('reason')}) without a report; the export is unfinished and is "
            "retried with cleanup",
            reason="export-failed",
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """In the export Job's pod: ``RUN_DIR gs://BUCKET/PREFIX/``; the report goes to the
    termination message (at most 4096 bytes)."""
    from controller.stores.gcs import export_run
    from ledger import LedgerError

    run_dir, url = argv if argv is not None else sys.argv[1:]
    result = Path(current().get(RESULT_PATH_VARIABLE) or RESULT_PATH)
    try:
        receipt = export_run(Path(run_dir), url, progress=lambda text: print(text, flush=True))
    except (LedgerExportError, LedgerError) as error:
        report = {"error": {"reason": error.reason, "message": str(error)[:3500]}}
        result.write_text(json.dumps(report))
        print(f"export failed ({error.reason}): {error}", file=sys.stderr)
        return 1
    result.write_text(json.dumps({"receipt": asdict(receipt)}))
    print(f"exported {receipt.objects} objects to {receipt.url} ({receipt.skipped} were there)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
