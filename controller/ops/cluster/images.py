"""The images a cluster profile runs: built by ``scripts/build-images.sh`` (OCI archives and an
image map), then pushed to kind's local registry, or imported into existing nodes' containerd
(what ``kind load`` does inside a kind node), and the map rewritten to what the cluster pulls."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from controller.ops.cluster.steps import StepFailed
from controller.ops.repository import ROOT as REPO
from controller.platforms.kubernetes.images import pinned

BUILD_SCRIPT = REPO / "scripts" / "build-images.sh"
CONTAINERD_NAMESPACE = "k8s.io"
"""The containerd namespace the kubelet's CRI uses."""


@dataclass(frozen=True, slots=True)
class BuiltImages:
    """``build-images.sh``'s map: name -> ``ref@digest``, and each ref's OCI archive."""

    images: dict[str, str]
    archives: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> BuiltImages:
        data = json.loads(path.read_text())
        return cls(dict(data["images"]), dict(data.get("archives") or {}))


def run_build_script(script: Path, *, needs: str, reason: str) -> Path:
    """Run a build script, its progress lines indented; the path its last stdout line names."""
    process = subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None and process.stdout is not None
    for line in process.stderr:
        print(f"      {line.rstrip()}", file=sys.stderr, flush=True)
    output = process.stdout.read()
    if process.wait() != 0:
        raise StepFailed(
            f"{script.name} failed (exit {process.returncode}); its error is above ({needs})",
            reason=reason,
        )
    return Path(output.strip().splitlines()[-1])


def build_images(script: Path = BUILD_SCRIPT) -> BuiltImages:
    """Run the build script (seconds when nothing changed)."""
    needs = "scripts/install-node.sh installs what it needs: podman, mmdebstrap"
    return BuiltImages.load(run_build_script(script, needs=needs, reason="image-build-failed"))


def _run(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise StepFailed(f"{what}: {done.stderr.strip()[-800:]}", reason="image-transfer-failed")
    return done.stdout


def import_into_containerd(ctr: Path, socket: str, built: BuiltImages) -> list[str]:
    """Import each image the node lacks into its containerd under its digest (``kind load``'s
    substitute for an existing cluster's nodes); returns the references it imported."""
    base = [str(ctr), "--address", socket, "-n", CONTAINERD_NAMESPACE]
    present = set(_run([*base, "images", "ls", "-q"], f"listing images at {socket}").split())
    imported = []
    for ref, archive in sorted(built.archives.items()):
        if ref in present:
            continue
        name = ref.split("@", 1)[0]
        _run([*base, "images", "import", "--base-name", name, archive], f"importing {archive}")
        # The archive names its manifest name:build; pods name it name@sha256:<manifest>.
        _run([*base, "images", "tag", "--force", f"{name}:build", ref], f"tagging {ref}")
        imported.append(ref)
    return imported


def remove_from_containerd(ctr: Path, socket: str, refs: list[str]) -> int:
    """Remove what ``import_into_containerd`` added (``cluster down``); returns how many."""
    base = [str(ctr), "--address", socket, "-n", CONTAINERD_NAMESPACE]
    present = set(_run([*base, "images", "ls", "-q"], f"listing images at {socket}").split())
    gone = [ref for ref in refs if ref in present]
    gone += [f"{ref.split('@', 1)[0]}:build" for ref in gone]
    for ref in gone:
        subprocess.run([*base, "images", "rm", ref], capture_output=True, check=False)
    return len(refs)


def push_to_registry(
    engine: Path, registry: str, built: BuiltImages, before: dict[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Load each archive into the container engine, push it to ``registry`` (``host:port``) and
    return the image map with the references the nodes pull (``registry/...@sha256:...``), and
    what was pushed from which source reference. A source that ``before`` (the previous such
    map) says is there already is not pushed again."""
    before = before or {}
    pushed: dict[str, str] = {}
    sources: dict[str, str] = {}
    for name, ref in sorted(built.images.items()):
        if ref in sources:  # one image under several names
            pushed[name] = sources[ref]
            continue
        archive = built.archives.get(ref)
        if archive is None:
            raise StepFailed(
                f"the image map has no archive for {ref}", reason="image-archive-missing"
            )
        previous = before.get(ref)
        if previous and previous.startswith(f"{registry}/") and registry_has(previous):
            pushed[name] = sources[ref] = previous
            continue
        _run([str(engine), "load", "-i", archive], f"loading {archive}")
        local = f"{ref.split('@', 1)[0]}:build"
        target = f"{registry}/{name.split('/', 1)[-1]}"
        pushed[name] = sources[ref] = push_image(engine, local, target)
        # the registry holds it now: no copy stays in the engine's storage
        subprocess.run([str(engine), "rmi", target, local], capture_output=True, check=False)
    return pushed, sources


def _insecure(registry: str) -> bool:
    """A registry on this machine speaks plain HTTP (kind's local registry)."""
    return registry.split("/", 1)[0].split(":", 1)[0] in ("localhost", "127.0.0.1")


def registry_has(pinned_ref: str) -> bool:
    """Whether a plain-HTTP registry on this machine serves ``host:port/repo@sha256:...``."""
    import urllib.error
    import urllib.request

    host, _, rest = pinned_ref.partition("/")
    repository, _, digest = rest.partition("@")
    if not _insecure(host) or not digest:
        return False
    url = f"http://{host}/v2/{repository}/manifests/{digest}"
    accept = {"Accept": ", ".join(MANIFEST_TYPES)}
    request = urllib.request.Request(url, method="HEAD", headers=accept)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


def push_image(engine: Path, local: str, target: str) -> str:
    """Tag the engine's image ``local`` as ``target``, push it, and return ``repo@sha256:...``
    as the registry reported it."""
    import tempfile

    _run([str(engine), "tag", local, target], f"tagging {target}")
    repository = target.rsplit(":", 1)[0]
    if engine.name == "podman":
        with tempfile.TemporaryDirectory() as scratch:
            digest_file = Path(scratch) / "digest"
            tls = ["--tls-verify=false"] if _insecure(target) else []
            _run([str(engine), "push", "--quiet", *tls, "--digestfile", str(digest_file), target],
                 f"pushing {target}")  # fmt: skip
            pinned_ref = f"{repository}@{digest_file.read_text().strip()}"
    else:
        _run([str(engine), "push", target], f"pushing {target}")
        digests = json.loads(
            _run(
                [str(engine), "image", "inspect", "--format", "{{json .RepoDigests}}", target],
                f"reading {target}'s digest",
            )
        )
        matching = [d for d in digests or [] if d.startswith(f"{repository}@")]
        pinned_ref = matching[0] if matching else ""
    if not pinned(pinned_ref):
        raise StepFailed(
            f"{engine.name} reports no registry digest for {target}",
            reason="image-digest-missing",
        )
    return pinned_ref


WORKER_IMAGE = "society/worker:dev"
SCRIPTED_IMAGE = "society/scripted:dev"
"""The run worker's image name in the map (the chart's ``worker.image``)."""


def chart_image_values(pushed: dict[str, str], *, warm_pool: int = 0) -> dict[str, object]:
    """Helm values for pushed images: the worker's image by digest, and the image map the
    worker resolves the controller's and the agents' images through (``imageMap``); with
    ``warm_pool``, a warm pool of that many sandboxes of the scripted runtime's shape
    (``warmPools``)."""
    worker = pushed.get(WORKER_IMAGE)
    if worker is None or not pinned(worker):
        raise StepFailed(f"the pushed images have no pinned {WORKER_IMAGE}", reason="image-missing")
    unpinned = sorted(name for name, ref in pushed.items() if not pinned(ref))
    if unpinned:
        raise StepFailed(
            f"{unpinned[0]} was pushed without a digest", reason="image-digest-missing"
        )
    repository, digest = worker.split("@", 1)
    values: dict[str, object] = {
        "worker": {"image": {"repository": repository, "digest": digest}},
        "imageMap": dict(sorted(pushed.items())),
    }
    if warm_pool:
        from controller.agents import scripted
        from controller.platforms.kubernetes import warm

        scripted_image = pushed.get(SCRIPTED_IMAGE)
        if scripted_image is None:
            raise StepFailed(f"the pushed images have no {SCRIPTED_IMAGE}", reason="image-missing")
        descriptor = scripted(image=scripted_image)
        values["warmPools"] = [warm.template(descriptor), warm.pool(descriptor, warm_pool)]
    return values
