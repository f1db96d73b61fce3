"""Harvest from a sandbox: declared workspace files read through the exec API in the pod's
keeper container, and the agent's log, written under the run directory's ``artifacts/``."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio

from controller.agents.runtime import Harvest
from controller.events.run import HarvestOutcome
from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes.kube import Kube, KubeError
from controller.platforms.kubernetes.sandbox import KubernetesSandbox
from controller.run.platform import HarvestedItem

_LOG_TIMEOUT_S = 5.0
_EXEC_TIMEOUT_S = 30.0
_ABSENT, _OVERSIZE, _REFUSED = 66, 65, 67
_READ_FILE = f"""
import os, stat, sys
root = os.path.realpath(sys.argv[1])
path = os.path.realpath(os.path.join(root, sys.argv[2]))
limit = int(sys.argv[3])
if os.path.commonpath([root, path]) != root:
    sys.stderr.write("the path leads outside the working directory")
    sys.exit({_REFUSED})
try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
except FileNotFoundError:
    sys.exit({_ABSENT})
info = os.fstat(fd)
if not stat.S_ISREG(info.st_mode):
    sys.stderr.write("not a regular file")
    sys.exit({_REFUSED})
if info.st_size > limit:
    print(info.st_size)
    sys.exit({_OVERSIZE})
with os.fdopen(fd, "rb") as handle:
    sys.stdout.buffer.write(handle.read(limit + 1))
"""
"""Runs in the keeper container (the agent's image has Python): one declared file to stdout;
exit 66 absent, 65 oversize (its size on stdout), 67 refused (outside the working directory or
not a regular file)."""


async def capture_log(kube: Kube, namespace: str, sandbox: KubernetesSandbox) -> None:
    """Keep the pod's log on ``sandbox`` (once), or why it could not be read."""
    if sandbox.log is not None or sandbox.log_detail is not None:
        return
    limit = 4 * 1024 * 1024
    try:
        with anyio.fail_after(_LOG_TIMEOUT_S):
            sandbox.log = await kube.log(
                sandbox.pod, namespace, container=objects.AGENT_CONTAINER, limit_bytes=limit
            )
    except Exception as exc:
        sandbox.log_detail = f"the pod's log could not be read: {type(exc).__name__}: {exc}"


async def harvest(
    kube: Kube, namespace: str, run_dir: Path, sandbox: KubernetesSandbox, declared: Harvest
) -> list[HarvestedItem]:
    limit = declared.max_bytes
    items = []
    for path in declared.files:
        items.append(await _harvest_file(kube, namespace, run_dir, sandbox, path, limit))
    if declared.logs:
        await capture_log(kube, namespace, sandbox)
        items.append(await anyio.to_thread.run_sync(_write_log, run_dir, sandbox, limit))
    return items


async def _harvest_file(
    kube: Kube, namespace: str, run_dir: Path, sandbox: KubernetesSandbox, path: str, limit: int
) -> HarvestedItem:
    """Read one declared file through the exec API, in the pod's keeper container."""

    def item(outcome: HarvestOutcome, **fields: Any) -> HarvestedItem:
        return HarvestedItem(
            kind="workspace", name=path, outcome=outcome, limit_bytes=limit, **fields
        )

    try:
        with anyio.fail_after(_EXEC_TIMEOUT_S):
            result = await kube.exec(
                sandbox.pod,
                namespace,
                container=objects.KEEPER_CONTAINER,
                command=["python", "-c", _READ_FILE, objects.WORKDIR, path, str(limit)],
                limit_bytes=limit,
            )
    except (KubeError, TimeoutError, OSError) as exc:
        return item(
            "unreadable",
            detail=f"the Kubernetes exec API could not read it from pod {sandbox.pod} "
            f"(container {objects.KEEPER_CONTAINER}): {type(exc).__name__}: {exc}",
        )
    code = result.exit_code
    if code == _ABSENT:
        return item("absent")
    if code == _OVERSIZE:
        return item("oversize", size=int(result.stdout.strip() or 0))
    if code != 0 or len(result.stdout) > limit:
        why = result.stderr.decode(errors="replace").strip()[-300:] or "no message"
        return item("unreadable", detail=f"the reader in the pod exited {code}: {why}")
    return await anyio.to_thread.run_sync(_write_file, run_dir, sandbox, path, result.stdout, limit)


def _write_file(
    run_dir: Path, sandbox: KubernetesSandbox, path: str, data: bytes, limit: int
) -> HarvestedItem:
    relative = Path("artifacts") / sandbox.name / "workspace" / path
    target = run_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return HarvestedItem(
        kind="workspace",
        name=path,
        outcome="harvested",
        limit_bytes=limit,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        artifact=str(relative),
    )


def _write_log(run_dir: Path, sandbox: KubernetesSandbox, limit: int) -> HarvestedItem:
    name = "output.log"
    if sandbox.log is None:
        return HarvestedItem(
            kind="log", name=name, outcome="unreadable", limit_bytes=limit,
            detail=sandbox.log_detail,
        )  # fmt: skip
    if len(sandbox.log) > limit:
        return HarvestedItem(
            kind="log", name=name, outcome="oversize", limit_bytes=limit,
            size=len(sandbox.log),
        )  # fmt: skip
    relative = Path("artifacts") / sandbox.name / "logs" / name
    target = run_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(sandbox.log)
    return HarvestedItem(
        kind="log",
        name=name,
        outcome="harvested",
        limit_bytes=limit,
        sha256=hashlib.sha256(sandbox.log).hexdigest(),
        size=len(sandbox.log),
        artifact=str(relative),
    )
