"""``society profile check``: the kind and GKE profiles' checked-in contracts, offline.

What passing proves: the chart lints and renders for the profile's values; every rendered object
and every object the platform code creates for a sample roster is valid against the pinned
Kubernetes, Kueue and Agent Sandbox schemas; Terraform is formatted, passes tflint's built-in
rules and has the structure asserted in ``terraform_checks``; image references carry digests;
the pins agree; shell scripts parse and pass shellcheck. What it does not prove: that a digest
exists in a registry, that ``tofu validate`` passes against the Google provider's schema (see
``terraform/ci/validate.yml``), or anything about a live cluster.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

import controller.settings as s
from controller.errors import OpsError
from controller.ops.checks import kube_schemas, pins, terraform_checks
from controller.ops.checks.sample_objects import sample_run_objects
from controller.ops.checks.tools import read_versions, shellcheck, tool
from controller.ops.repository import ROOT as REPO
from controller.platforms.kubernetes.settings import KubernetesSettings

TERRAFORMED: dict[str, bool] = {"kind": False, "gke": True}
"""The profiles with checked-in contracts, and whether Terraform stands theirs up (its values
feed the chart, its wiring and HCL are checked); the one place these checks name a profile."""
PROFILES = tuple(TERRAFORMED)
CHART = REPO / "helm" / "society-runner"
RELEASE_NAMESPACE = "society-system"
SAMPLE_DIGEST = "sha256:" + "1" * 64


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """One named check and what it found wrong (nothing: it passed)."""

    name: str
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def _run(argv: Sequence[str | Path], cwd: Path = REPO) -> tuple[int, str]:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def gke_sample_values(tf: terraform_checks.Terraform | None = None) -> dict[str, Any]:
    """What ``terraform output helm_values`` yields, from the module's own locals; the registry,
    bucket and service account are placeholders (they exist only after ``apply``)."""
    tf = tf or terraform_checks.Terraform.load()
    label = tf.resolve(tf.locals["agents_pool_label"])
    system = tf.resolve(tf.locals["system_pool_label"])
    return {
        "worker": {
            "image": {"repository": "europe-west4-docker.pkg.dev/project/society-images/worker"},
            "serviceAccountAnnotations": {
                "iam.gke.io/gcp-service-account": "ledger@project.iam.gserviceaccount.com"
            },
            "nodeSelector": {system["key"]: system["value"]},
        },
        "agents": {
            "nodeSelector": {label["key"]: label["value"]},
            "tolerations": terraform_checks.agents_tolerations(tf),
        },
        "agentQueue": {"cpu": "45", "memory": "156Gi"},
        "ledgerExport": {"bucket": "society-ledgers"},
    }


def helm_values_mirror_problems(tf: terraform_checks.Terraform | None = None) -> list[str]:
    """``gke_sample_values`` must set exactly the keys Terraform's ``helm_values`` output sets,
    or the GKE render would check values Terraform never hands over."""
    import re

    tf = tf or terraform_checks.Terraform.load()
    expression = str(tf.outputs.get("helm_values", {}).get("value", ""))
    quoted = re.sub(r'"[^"]*"\s*=', "", expression)  # annotation keys are data, not structure
    in_terraform = set(re.findall(r"\b([A-Za-z][A-Za-z0-9]*)\s*=(?!=)", quoted))

    def keys(node: Any) -> set[str]:
        if not isinstance(node, dict):
            return set()
        found = set()
        for key, value in node.items():
            if "." not in key and "/" not in key:
                found.add(key)
                found |= keys(value)
        return found

    in_sample = keys(gke_sample_values(tf))
    if in_terraform == in_sample:
        return []
    return [
        f"terraform output helm_values sets {sorted(in_terraform - in_sample)} and the check's "
        f"mirror of it sets {sorted(in_sample - in_terraform)} beyond the other; update "
        "gke_sample_values in controller/ops/checks/check.py with the output"
    ]


def values_files(profile: str, scratch: Path) -> list[Path]:
    """The values files ``helm`` gets for ``profile`` (GKE: values-gke.yaml, then Terraform's)."""
    from controller.ops.cluster.images import WORKER_IMAGE, chart_image_values
    from controller.platforms.kubernetes.images import CONTROLLER_IMAGE

    files = [scratch / "digest.yaml"]
    terraformed = TERRAFORMED[profile]
    if terraformed:  # what `society cluster push-images --values-out` writes
        registry = "us-central1-docker.pkg.dev/project/society"
        pushed = {name: f"{registry}/{name.split('/')[-1].split(':')[0]}@{SAMPLE_DIGEST}"
                  for name in (WORKER_IMAGE, CONTROLLER_IMAGE, "society/scripted:dev")}  # fmt: skip
        files[0].write_text(yaml.safe_dump(chart_image_values(pushed)))
    else:
        files[0].write_text(yaml.safe_dump({"worker": {"image": {"digest": SAMPLE_DIGEST}}}))
    if terraformed:
        terraform_values = scratch / "terraform-helm-values.yaml"
        terraform_values.write_text(yaml.safe_dump(gke_sample_values()))
        files = [CHART / "values-gke.yaml", terraform_values, *files]
    return files


def helm_template(profile: str, scratch: Path) -> list[dict[str, Any]]:
    """The chart's objects for ``profile``, rendered by the pinned helm."""
    argv: list[str | Path] = [tool("helm"), "template", "society-runner", CHART]
    argv += ["--namespace", RELEASE_NAMESPACE]
    for values in values_files(profile, scratch):
        argv += ["-f", values]
    code, output = _run(argv)
    if code != 0:
        raise HelmTemplateFailed(output)
    return [obj for obj in yaml.safe_load_all(output) if obj]


class HelmTemplateFailed(OpsError):
    """``helm template`` failed; the message is its output."""

    reason = "helm-template-failed"


def check_helm(profile: str, scratch: Path) -> tuple[CheckOutcome, list[dict[str, Any]]]:
    argv: list[str | Path] = [tool("helm"), "lint", "--strict", CHART]
    for values in values_files(profile, scratch):
        argv += ["-f", values]
    code, output = _run(argv)
    problems = [] if code == 0 else [f"helm lint failed:\n{output}"]
    rendered: list[dict[str, Any]] = []
    try:
        rendered = helm_template(profile, scratch)
    except HelmTemplateFailed as exc:
        problems.append(f"helm template failed:\n{exc}")
    if TERRAFORMED[profile] and rendered:
        problems += _gke_wiring(rendered)
    return CheckOutcome(f"helm lint and template ({profile} values)", problems), rendered


def _gke_wiring(rendered: list[dict[str, Any]]) -> list[str]:
    """Terraform's outputs reach the worker: tolerations, bucket, identity, Temporal Secret."""
    import json

    worker = next((o for o in rendered if o["kind"] == "Deployment"), None)
    account = next((o for o in rendered if o["kind"] == "ServiceAccount"), None)
    if worker is None or account is None:
        return ["the GKE render has no worker Deployment or ServiceAccount"]
    container = worker["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container.get("env", [])}
    expected = gke_sample_values()
    problems = []
    tolerations = json.loads(env.get(s.AGENT_TOLERATIONS.name, {}).get("value", "[]"))
    if tolerations != expected["agents"]["tolerations"]:
        problems.append(f"agents' tolerations {tolerations} are not Terraform's taint")
    if env.get(s.LEDGER_EXPORT.name, {}).get("value") != "gs://society-ledgers":
        problems.append("the worker does not export ledgers to Terraform's bucket")
    annotations = account["metadata"].get("annotations", {})
    if "iam.gke.io/gcp-service-account" not in annotations:
        problems.append("the worker's ServiceAccount is not bound to a Google service account")
    if not _from_secret_volume(worker, env.get(s.SIGNING_KEY.name, {}).get("value")):
        problems.append("the worker does not sign with the operator key from a Secret")
    if "valueFrom" not in env.get("TEMPORAL_ADDRESS", {}):
        problems.append("Temporal's address does not come from a Secret on GKE")
    problems += _submission_wiring(container)
    problems += _export_wiring(rendered, worker_settings(rendered))
    return problems


def _export_wiring(rendered: list[dict[str, Any]], settings: KubernetesSettings) -> list[str]:
    """What a GKE run needs to complete and be exported: the controller as the run's Job, a
    ledger claim of a rendered ``Retain`` StorageClass, and the controller's image in the map."""
    from controller.incluster.controller_job import controller_image
    from controller.run.platform import PlatformError

    problems = []
    if not settings.runs_controller_job:
        problems.append(
            "the GKE worker runs the controller in its own pod (controllerJob: false), which an "
            "in-cluster worker refuses: every run would fail"
        )
    classes = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "StorageClass"}
    if not settings.ledger_claim:
        problems.append("the GKE worker has no ledger claim (ledger.claim): nothing to export")
    elif classes.get(settings.ledger_storage_class or "", {}).get("reclaimPolicy") != "Retain":
        problems.append(
            f"the ledger claim's StorageClass {settings.ledger_storage_class!r} is not rendered "
            "with reclaimPolicy Retain: a run whose export failed would lose its ledger"
        )
    try:
        controller_image(settings)
    except PlatformError as error:
        problems.append(f"the GKE worker cannot pin the controller's image: {error}")
    return problems


def _submission_wiring(container: dict[str, Any]) -> list[str]:
    """What ``society run --profile gke`` needs of the worker: that it polls the task queue the
    CLI submits to, and keeps runs under its own writable artifact root."""
    from controller.profiles import CLUSTER_TASK_QUEUE

    command = [str(part) for part in container.get("command", [])]
    queue = command[command.index("--task-queue") + 1] if "--task-queue" in command else None
    problems = []
    if queue != CLUSTER_TASK_QUEUE:
        problems.append(
            f"the worker polls task queue {queue!r}, not {CLUSTER_TASK_QUEUE!r}, where "
            "`society run --profile gke` submits"
        )
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    root = env.get(s.ARTIFACTS.name)
    if root is None or root not in mounts or mounts[root].get("readOnly"):
        problems.append("the worker's artifact root (SOCIETY_ARTIFACTS) is not a writable volume")
    return problems


def _from_secret_volume(deployment: dict[str, Any], path: str | None) -> bool:
    """Whether ``path`` lies on a volume mounted from a Secret in the worker's container."""
    if not path:
        return False
    spec = deployment["spec"]["template"]["spec"]
    secrets = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
    mounts = spec["containers"][0].get("volumeMounts", [])
    return any(
        m["name"] in secrets and path.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts
    )


def worker_settings(rendered: list[dict[str, Any]]) -> KubernetesSettings:
    """The settings the rendered worker Deployment's environment gives the platform code."""
    worker = next((o for o in rendered if o.get("kind") == "Deployment"), None)
    if worker is None:
        return KubernetesSettings()
    env = worker["spec"]["template"]["spec"]["containers"][0].get("env", [])
    return KubernetesSettings.from_environment({e["name"]: e["value"] for e in env if "value" in e})


def check_schemas(profile: str, rendered: list[dict[str, Any]], scratch: Path) -> CheckOutcome:
    objects = rendered + sample_run_objects(settings=worker_settings(rendered))
    manifest = scratch / f"{profile}-objects.yaml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    location = str(kube_schemas.SCHEMA_DIR / kube_schemas.LOCATION_TEMPLATE)
    argv: list[str | Path] = [tool("kubeconform"), "-strict", "-summary"]
    argv += ["-schema-location", location, manifest]
    code, output = _run(argv)
    name = f"kubeconform: {len(objects)} objects (chart + sample run) against the pinned schemas"
    return CheckOutcome(name, [] if code == 0 else [output])


def check_terraform(directory: Path = terraform_checks.TERRAFORM_DIR) -> list[CheckOutcome]:
    code, output = _run([tool("tofu"), "fmt", "-check", "-recursive", "-diff"], cwd=directory)
    outcomes = [CheckOutcome("tofu fmt -check", [] if code == 0 else [output])]
    # No .tflint.hcl: the bundled terraform ruleset's recommended preset, nothing downloaded.
    code, output = _run([tool("tflint"), "--format", "compact"], cwd=directory)
    outcomes.append(CheckOutcome("tflint (built-in rules)", [] if code == 0 else [output]))
    try:
        terraform = terraform_checks.Terraform.load(directory)
        problems = terraform_checks.structure_problems(terraform)
        problems += helm_values_mirror_problems(terraform)
    except terraform_checks.TerraformUnreadable as exc:
        problems = [str(exc)]
    outcomes.append(CheckOutcome("terraform structure (HCL assertions)", problems))
    return outcomes


def shell_scripts() -> list[Path]:
    """Tracked files that are bash scripts (by extension or shebang)."""
    code, output = _run(["git", "ls-files"])
    names = (
        output.splitlines() if code == 0 else [str(p.relative_to(REPO)) for p in REPO.rglob("*.sh")]
    )
    found = []
    for name in names:
        path = REPO / name
        if not path.is_file():
            continue
        if name.endswith(".sh"):
            found.append(path)
            continue
        with path.open("rb") as handle:
            first = handle.readline(100)
        if first.startswith(b"#!") and (b"bash" in first or first.rstrip().endswith(b"/sh")):
            found.append(path)
    return found


def check_shell(scripts: list[Path] | None = None) -> CheckOutcome:
    scripts = shell_scripts() if scripts is None else scripts
    problems = []
    for script in scripts:
        code, output = _run(["bash", "-n", script])
        if code != 0:
            problems.append(f"bash -n {_shown(script)}: {output}")
    if scripts:
        code, output = _run(
            [shellcheck(), "--external-sources", "--source-path=SCRIPTDIR", *scripts]
        )
        if code != 0:
            problems.append(output)
    return CheckOutcome(f"bash -n and shellcheck ({len(scripts)} scripts)", problems)


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def run_checks(
    profile: str, progress: Callable[[CheckOutcome], None] | None = None
) -> list[CheckOutcome]:
    """Every check of ``profile``; raises ``ToolMissing`` naming the install command."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    outcomes: list[CheckOutcome] = []

    def done(outcome: CheckOutcome) -> None:
        outcomes.append(outcome)
        if progress is not None:
            progress(outcome)

    with tempfile.TemporaryDirectory(prefix="society-profile-check-") as tmp:
        scratch = Path(tmp)
        helm_outcome, rendered = check_helm(profile, scratch)
        done(helm_outcome)
        done(check_schemas(profile, rendered, scratch))
        done(CheckOutcome("image references pinned by digest", pins.digest_problems(rendered)))
        done(CheckOutcome("pinned versions agree", pins.version_problems(read_versions())))
        if TERRAFORMED[profile]:
            for outcome in check_terraform():
                done(outcome)
        done(check_shell())
    return outcomes
