"""``society profile check``: passes on the checked-in profiles with the pinned tools, fails on a
broken object, digest or pin, and names the install command when a tool is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controller.ops.checks import check, pins
from controller.ops.checks.sample_objects import sample_run_objects
from controller.ops.checks.tools import REPO, ToolMissing, read_versions, shellcheck, tool
from controller.platforms.kubernetes import KubernetesSettings

SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def society(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [*SOCIETY, *args], capture_output=True, text=True, timeout=600, env=environment, cwd=REPO
    )


def require(*names: str) -> None:
    """Fails (never skips) when scripts/build-tools.sh has not built the tools."""
    for name in names:
        try:
            tool(name)
        except ToolMissing as exc:
            pytest.fail(str(exc))


@pytest.fixture(scope="module", autouse=True)
def chart_tools_built() -> None:
    require("helm", "kubeconform")


def test_both_profiles_pass_every_check_and_say_what_the_checks_do_not_prove() -> None:
    require("tofu", "tflint")
    done = society("profile", "check", "kind", "gke")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout
    for name in ("helm lint", "kubeconform", "tofu fmt -check", "tflint", "terraform structure",
                 "pinned by digest", "pinned versions agree", "shellcheck"):  # fmt: skip
        assert name in done.stdout, done.stdout
    assert "do not qualify a live cluster" in done.stdout


def test_a_missing_tool_exits_2_naming_the_command_that_builds_it(tmp_path: Path) -> None:
    done = society("profile", "check", "kind", env={"SOCIETY_TOOLS_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert "helm is not installed" in done.stderr
    assert "scripts/build-tools.sh" in done.stderr


def test_an_unknown_profile_is_refused_with_the_choices() -> None:
    done = society("profile", "check", "eks")
    assert done.returncode == 2
    assert "choose from kind, gke" in done.stderr


def test_the_gke_render_carries_terraforms_tolerations_bucket_identity_and_temporal_secret(
    tmp_path: Path,
) -> None:
    outcome, rendered = check.check_helm("gke", tmp_path)
    assert outcome.passed, outcome.problems
    assert check._gke_wiring(rendered) == []
    worker = next(o for o in rendered if o["kind"] == "Deployment")
    env = {e["name"]: e for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SOCIETY_AGENT_NODE_SELECTOR"]["value"] == "society.run/pool=agents"
    assert env["TEMPORAL_ADDRESS"]["valueFrom"]["secretKeyRef"] == {
        "name": "temporal", "key": "address"}  # fmt: skip


def test_agents_pods_carry_the_gke_pools_selector_and_tolerations_through_the_worker_settings(
    tmp_path: Path,
) -> None:
    _, rendered = check.check_helm("gke", tmp_path)
    settings = check.worker_settings(rendered)
    sandboxes = [o for o in sample_run_objects(settings=settings) if o["kind"] == "Sandbox"]
    expected = check.gke_sample_values()["agents"]
    for sandbox in sandboxes:
        pod = sandbox["spec"]["podTemplate"]["spec"]
        assert pod["tolerations"] == expected["tolerations"]
        assert pod["nodeSelector"] == expected["nodeSelector"]
    job = next(o for o in sample_run_objects(settings=settings) if o["kind"] == "Job")
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert json.loads(env["SOCIETY_AGENT_TOLERATIONS"]) == expected["tolerations"]


def test_kind_render_keeps_temporal_in_values_and_exports_nothing(tmp_path: Path) -> None:
    _, rendered = check.check_helm("kind", tmp_path)
    worker = next(o for o in rendered if o["kind"] == "Deployment")
    env = {e["name"]: e for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "value" in env["TEMPORAL_ADDRESS"]
    assert "SOCIETY_LEDGER_EXPORT" not in env and "SOCIETY_AGENT_TOLERATIONS" not in env


def broken(objects: list[dict[str, Any]], kind: str, edit: Any) -> list[dict[str, Any]]:
    chosen = next(o for o in objects if o["kind"] == kind)
    edit(chosen)
    return objects


@pytest.mark.parametrize(
    ("kind", "edit", "said"),
    [
        ("Sandbox", lambda o: o["spec"].update(podTemplat={}), "podTemplat"),
        ("Workload", lambda o: o["spec"]["podSets"][0].update(count="two"), "count"),
        ("NetworkPolicy", lambda o: o["spec"].update(policyTypes="Ingress"), "policyTypes"),
        ("Job", lambda o: o["metadata"].update(labelz={}), "labelz"),
    ],
)
def test_kubeconform_rejects_an_object_the_pinned_schemas_do_not_allow(
    tmp_path: Path, kind: str, edit: Any, said: str
) -> None:
    objects = broken(sample_run_objects(), kind, edit)
    outcome = check.check_schemas("kind", objects[:0], tmp_path)  # the sample alone passes
    assert outcome.passed, outcome.problems
    (tmp_path / "bad").mkdir()
    bad = check.check_schemas("bad", objects, tmp_path / "bad")
    assert not bad.passed
    assert said in "\n".join(bad.problems)


def test_a_dockerfile_base_without_a_digest_is_named(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "ARG BASE=python:3.11-slim\nFROM ${BASE} AS build\nFROM build\n"
        "FROM docker.io/library/debian:12@sha256:" + "a" * 64 + "\n"
    )
    bases = pins.dockerfile_bases(dockerfile)
    assert bases == ["python:3.11-slim", "docker.io/library/debian:12@sha256:" + "a" * 64]
    assert [b for b in bases if not pins.DIGEST_REFERENCE.match(b)] == ["python:3.11-slim"]
    assert not pins.DIGEST_REFERENCE.match("repo@sha256:" + "A" * 64)
    assert not pins.DIGEST_REFERENCE.match("repo@sha256:" + "a" * 63)


def test_every_checked_in_dockerfile_and_the_kind_config_pin_a_digest() -> None:
    assert pins.digest_problems([]) == []


def test_the_shell_scripts_found_include_the_ci_entry_point() -> None:
    found = {str(p.relative_to(REPO)) for p in check.shell_scripts()}
    assert {".ci/run", "scripts/test.sh", "scripts/build-tools.sh"} <= found


def test_the_gke_render_mirrors_exactly_the_keys_terraforms_helm_values_output_sets(
    tmp_path: Path,
) -> None:
    import shutil

    from controller.ops.checks import terraform_checks

    assert check.helm_values_mirror_problems() == []
    copy = tmp_path / "terraform"
    shutil.copytree(terraform_checks.TERRAFORM_DIR, copy)
    outputs = (copy / "outputs.tf").read_text()
    (copy / "outputs.tf").write_text(outputs.replace("ledgerExport = {", "ledgerBucket = {"))
    problems = check.helm_values_mirror_problems(terraform_checks.Terraform.load(copy))
    assert problems and "ledgerBucket" in problems[0] and "ledgerExport" in problems[0]


def test_tofu_fmt_and_tflint_fail_on_a_misformatted_file_and_an_unused_variable(
    tmp_path: Path,
) -> None:
    import shutil

    from controller.ops.checks import terraform_checks

    require("tofu", "tflint")
    copy = tmp_path / "terraform"
    shutil.copytree(terraform_checks.TERRAFORM_DIR, copy)
    assert all(outcome.passed for outcome in check.check_terraform(copy))
    (copy / "extra.tf").write_text('variable "never_used" {\n  type=string\n}\n')
    outcomes = {outcome.name: outcome for outcome in check.check_terraform(copy)}
    assert not outcomes["tofu fmt -check"].passed
    assert "extra.tf" in outcomes["tofu fmt -check"].problems[0]
    assert not outcomes["tflint (built-in rules)"].passed
    assert "never_used" in outcomes["tflint (built-in rules)"].problems[0]


def test_a_script_that_does_not_parse_or_that_shellcheck_flags_is_named(tmp_path: Path) -> None:
    try:
        shellcheck()
    except ToolMissing as exc:
        pytest.fail(str(exc))
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/usr/bin/env bash\nif true; then\n  echo missing fi\n")
    unquoted = tmp_path / "unquoted.sh"
    unquoted.write_text("#!/usr/bin/env bash\nset -euo pipefail\nrm -rf $1/data\n")
    outcome = check.check_shell([broken, unquoted])
    text = "\n".join(outcome.problems)
    assert f"bash -n {broken}" in text
    assert "SC2086" in text  # double quote to prevent globbing and word splitting
    assert check.check_shell([]).problems == []


def test_a_chart_annotation_or_node_image_that_disagrees_with_the_pins_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool_versions = read_versions()
    assert pins.version_problems(tool_versions) == []
    chart = tmp_path / "chart"
    chart.mkdir()
    text = (pins.CHART / "Chart.yaml").read_text()
    kueue = read_versions(pins.KIND_VERSIONS)["KUEUE_VERSION"]
    (chart / "Chart.yaml").write_text(text.replace(kueue, "v0.16.9"))
    monkeypatch.setattr(pins, "CHART", chart)
    kind_config = tmp_path / "cluster.yaml"
    kind_config.write_text(pins.KIND_CONFIG.read_text().replace("v1.36.1@", "v1.35.4@"))
    monkeypatch.setattr(pins, "KIND_CONFIG", kind_config)
    problems = "\n".join(pins.version_problems(tool_versions))
    assert "society.run/kueue-version = 'v0.16.9' but kind/versions.env KUEUE_VERSION" in problems
    assert "node image kindest/node:v1.35.4@" in problems and "is not Kubernetes 1.36" in problems


def test_the_gke_worker_polls_the_queue_society_run_submits_to_and_keeps_runs_on_its_volume(
    tmp_path: Path,
) -> None:
    from controller.profiles import CLUSTER_TASK_QUEUE

    _, rendered = check.check_helm("gke", tmp_path)
    worker = next(o for o in rendered if o["kind"] == "Deployment")
    container = worker["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--task-queue") + 1] == CLUSTER_TASK_QUEUE
    assert check._gke_wiring(rendered) == []

    command[command.index("--task-queue") + 1] = "elsewhere"
    key = next(e for e in container["env"] if e["name"] == "SOCIETY_SIGNING_KEY")
    key["value"] = "/tmp/key.pem"  # not on the Secret's volume
    problems = "\n".join(check._gke_wiring(rendered))
    assert "polls task queue 'elsewhere'" in problems
    assert "operator key from a Secret" in problems


def test_a_gke_render_that_could_not_complete_or_keep_a_run_is_named(tmp_path: Path) -> None:
    _, rendered = check.check_helm("gke", tmp_path)
    settings = check.worker_settings(rendered)
    assert check._export_wiring(rendered, settings) == []
    assert settings.ledger_claim == "society-ledger" and settings.runs_controller_job
    classes = [o for o in rendered if o["kind"] == "StorageClass"]
    assert [(c["metadata"]["name"], c["provisioner"]) for c in classes] == [
        ("society-ledgers", "pd.csi.storage.gke.io")
    ]

    in_worker = KubernetesSettings(controller_job=False, ledger_claim=None)
    problems = "\n".join(check._export_wiring(rendered, in_worker))
    assert "controllerJob: false" in problems and "no ledger claim" in problems
    assert "controller's image" in problems  # no image map either
    for storage_class in classes:
        storage_class["reclaimPolicy"] = "Delete"
    assert "reclaimPolicy Retain" in "\n".join(check._export_wiring(rendered, settings))
