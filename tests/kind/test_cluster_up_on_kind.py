"""``society cluster up --profile kind`` for real on this machine: kind creates the cluster from
``kind/cluster.yaml`` (the host's patches through ``--host-patches``, the node image built here
through ``--node-image``), the registry, Kueue and Agent Sandbox built from the Go module proxy
(``--addons-from-source``), the project's images pushed to that registry, the in-cluster
Temporal, the chart and the profile file; the NetworkPolicy probe passes by enforcement. Then
``society run examples/negotiation.py`` and ``examples/partition.py --profile kind`` with no
``SOCIETY_*`` or ``TEMPORAL_*`` variable: the controller as the run's Job, agents in Agent
Sandbox pods, the ledger home through kind's ``extraMounts``; ``society ledger verify`` and
``society grade`` pass. A second ``up`` changes nothing, and ``down`` leaves no container,
network, volume, mount, interface, firewall rule or process of the cluster behind.

Its cluster is ``society-kind-up`` (not tests/kind's ``society-kind-test``); it binds
``kind/cluster.yaml``'s host ports (127.0.0.1:17233 and :18233) and the registry's
127.0.0.1:5001, so it runs alone, as pytest runs these files one after the other.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kind_cluster import ENABLE_HINT, ROOT, podman_names, script_output

pytestmark = pytest.mark.slow

NAME = "society-kind-up"
NETWORK = "kind"
REGISTRY = "kind-registry"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
EXAMPLES = ROOT / "examples"
WARM_POOL = 3
"""`up`'s warm pool: the examples' rosters (2 and 3 scripted agents of the default shape) fit."""
GO = "/usr/local/go/bin/go"


def _environment() -> dict[str, str]:
    """The caller's environment without any run setting; kind, the node image's kubectl and the
    pinned helm on PATH."""
    from controller.ops.checks import tools

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SOCIETY_", "TEMPORAL_", "KIND_", "CONTAINERS_"))
           and k != "KUBECONFIG"}  # fmt: skip
    kind = Path(script_output("install-kind.sh")).parent
    kubectl = Path(script_output("build-kind-node-image.sh", "--print-dir")) / "bin"
    path = [str(kind), str(kubectl), str(tools.tools_dir() / "bin"), env.get("PATH", "/usr/bin")]
    env["PATH"] = ":".join(path)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _society(env: dict[str, str], *args: str | Path, timeout: float = 1500) -> Any:
    return subprocess.run([*SOCIETY, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)  # fmt: skip


def _footprint() -> dict[str, list[str]]:
    """What of the cluster and its registry is on this machine: containers, volumes, kind's
    network, mounts, interfaces, firewall rules, processes."""
    label = f"label=io.x-k8s.kind.cluster={NAME}"
    containers = podman_names("container", label) | {
        n for n in podman_names("container") if n.startswith(f"{NAME}-") or n == REGISTRY
    }
    found = {
        "container": sorted(containers),
        "volume": sorted(podman_names("volume", label)),
        "network": sorted(n for n in podman_names("network") if n == NETWORK),
    }
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found["mount"] = [line for line in mounts if NAME in line]
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True,
                                      check=True).stdout)  # fmt: skip
    found["interface"] = [link["ifname"] for link in links if NAME in link["ifname"]]
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    found["firewall rule"] = [r for r in rules.splitlines() if f'\\"{NETWORK}\\"' in r]
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found["process"] = [p for p in processes.splitlines() if NAME in p or f"-n {REGISTRY}" in p]
    return found


def _missing() -> str | None:
    go = shutil.which("go") or (GO if Path(GO).exists() else None)
    for tool, found in (("podman", shutil.which("podman")), ("go", go)):
        if found is None:
            return f"'{tool}' is not on PATH"
    image = script_output("build-kind-node-image.sh", "--print-image")
    if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        return f"the node image {image} is not built"
    if any(n.startswith(f"{NAME}-") for n in podman_names("container")):
        return f"a cluster {NAME} is left over: `kind delete cluster --name {NAME}` removes it"
    return None


@pytest.fixture
def kind_up(tmp_path: Path) -> Any:
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {missing}: {ENABLE_HINT}")
        pytest.skip(f"{missing}: {ENABLE_HINT}")
    env = _environment()
    artifacts = tmp_path / "artifacts"
    up = [
        "cluster", "up", "--profile", "kind", "--artifacts", artifacts, "--name", NAME,
        "--provider", "podman", "--host-patches", ROOT / "kind" / "host", "--addons-from-source",
        "--node-image", script_output("build-kind-node-image.sh", "--print-image"),
        "--warm-pool", str(WARM_POOL),
    ]  # fmt: skip
    try:
        yield env, artifacts, up
    finally:
        _society(env, "cluster", "down", "--profile", "kind", "--artifacts", artifacts)
        kind = {**env, "KIND_EXPERIMENTAL_PROVIDER": "podman"}
        if any(n.startswith(f"{NAME}-") for n in podman_names("container")):
            subprocess.run(["kind", "delete", "cluster", "--name", NAME], env=kind,
                           capture_output=True)  # fmt: skip
        subprocess.run(["podman", "rm", "-f", "-v", REGISTRY], capture_output=True)


def _run_example(env: dict[str, str], artifacts: Path, example: str, trusted: Path) -> None:
    run = _society(env, "run", "--profile", "kind", "--artifacts", artifacts,
                   EXAMPLES / f"{example}.py", timeout=900)  # fmt: skip
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-5000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "ProgramFinished" and result["exit"] == "success", result
    assert not (artifacts / ".temporal").exists()  # the in-cluster Temporal ran it
    home = artifacts / result["runId"]
    assert f"copied the run directory home to {home}" in run.stderr, run.stderr[-3000:]
    verify = _society(env, "ledger", "verify", result["ledger"], "--trusted-key", trusted)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    verified = json.loads(verify.stdout.splitlines()[-1])
    assert verified["valid"] is True and verified["signature"] == "pinned", verified
    graded = _society(env, "grade", EXAMPLES / "graders" / f"{example}.py", home,
                      "--trusted-key", trusted)  # fmt: skip
    assert graded.returncode == 0, graded.stdout + graded.stderr
    # the in-cluster controller claimed every agent from `up`'s warm pool
    starts = {e.agent: e.sandbox_start for e in _ledger(example, result["ledger"], trusted)}
    assert starts and set(starts.values()) == {"warm"}, starts


def _ledger(example: str, ledger_dir: str, trusted: Path) -> list[Any]:
    """The example's ``AgentRuntimeReady`` events, from its verified ledger."""
    import importlib.util

    from controller.events.run import AgentRuntimeReady
    from ledger import open_ledger_artifacts

    module_spec = importlib.util.spec_from_file_location(f"_{example}", EXAMPLES / f"{example}.py")
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    ledger = open_ledger_artifacts(module.run_spec.catalog, ledger_dir, trusted_key=trusted)
    return list(ledger.events(AgentRuntimeReady))


def test_cluster_up_on_kind_runs_the_examples_then_up_again_changes_nothing_and_down_leaves_nothing(
    kind_up: Any,
) -> None:
    env, artifacts, up = kind_up
    first = _society(env, *up)
    assert first.returncode == 0, first.stderr[-6000:]
    progress = first.stderr
    assert f"created kind cluster '{NAME}'" in progress, progress
    assert "rendered from the Go module proxy's source" in progress, progress
    assert "enforced: a default-deny policy refused the probe" in progress, progress
    assert "society-warm/scripted-" in progress and f": {WARM_POOL} ready" in progress, progress
    profile = json.loads(Path(first.stdout.strip().splitlines()[-1]).read_text())
    assert profile["clusterName"] == NAME and profile["madeCluster"] is True
    assert all(ref.startswith("localhost:5001/") for ref in profile["images"].values()), profile
    kubectl = [shutil.which("kubectl", path=env["PATH"]) or "kubectl", "--kubeconfig",
               profile["kubeconfig"]]  # fmt: skip
    listed = subprocess.run([*kubectl, "get", "pods", "-A", "-o", "json"], capture_output=True,
                            text=True, check=True)  # fmt: skip
    pods = json.loads(listed.stdout)
    images = {c["image"] for p in pods["items"] for c in p["spec"]["containers"]}
    for addon in ("kueue", "agent-sandbox-controller"):
        assert any(i.startswith(f"localhost:5001/society/{addon}@sha256:") for i in images), images
    # the pools refill after a claiming run's agents started, not beside them (docs/kubernetes.md)
    sandbox = next(p for p in pods["items"] if "agent-sandbox-controller" in p["metadata"]["name"])
    arguments = sandbox["spec"]["containers"][0].get("args") or []
    assert "--sandbox-warm-pool-replenish-delay=5s" in arguments, arguments
    assert "--sandbox-concurrent-workers=16" in arguments, arguments

    trusted = Path(profile["signingKey"]).with_suffix(".pub")
    for example in ("negotiation", "partition"):
        _run_example(env, artifacts, example, trusted)

    second = _society(env, *up)
    assert second.returncode == 0, second.stderr[-6000:]
    again = second.stderr
    assert f"reused kind cluster '{NAME}'" in again and "reused kind-registry" in again, again
    assert "checked by an earlier `up`" in again and "unchanged;" in again, again
    # Only an image whose build changed since (another checkout's edit) is pushed again.
    later = json.loads(Path(second.stdout.strip().splitlines()[-1]).read_text())["pushed"]
    kept = {source: ref for source, ref in profile["pushed"].items() if source in later}
    assert all(later[source] == ref for source, ref in kept.items()), (profile["pushed"], later)
    fresh = len(set(later.values()) - set(profile["pushed"].values()))
    assert f" pushed {fresh} new to localhost:5001 ({len(set(kept.values()))} there" in again, again

    down = _society(env, "cluster", "down", "--profile", "kind", "--artifacts", artifacts)
    assert down.returncode == 0, down.stderr[-4000:]
    left = {kind: found for kind, found in _footprint().items() if found}
    assert left == {}, left


def test_a_create_that_fails_leaves_no_kind_network_behind(kind_up: Any) -> None:
    """kind makes its network before it starts the nodes; when a node cannot start (here another
    program holds the host port ``kind/cluster.yaml`` maps for Temporal), kind removes the nodes,
    and ``cluster up`` removes the network it had no record of."""
    env, _artifacts, up = kind_up
    before = {kind: found for kind, found in _footprint().items() if found}
    assert before == {}, f"this machine holds a kind cluster's parts already: {before}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 17233))
        holder.listen()
        failed = _society(env, *(a for a in up if a != "--addons-from-source"), timeout=600)
    assert failed.returncode != 0, failed.stderr[-4000:]
    assert "kind create cluster failed" in failed.stderr, failed.stderr[-4000:]
    assert f"the '{NETWORK}' podman network that kind made for it is removed" in failed.stderr
    left = {kind: found for kind, found in _footprint().items() if found}
    assert left == {}, left
