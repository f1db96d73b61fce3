#!/usr/bin/env bash
# The whole test suite. Installs (idempotently) what the tests need, then lints and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Everything the suite needs is installed below, so no test may skip for a missing part:
# fixtures that would skip on a developer's partial machine fail instead when CI is set.
export CI="${CI:-1}"
scripts/bootstrap.sh --all  # the dev tools, the local model and OpenClaw too
scripts/install-browser.sh
if [ -x scripts/build-control-plane.sh ]; then
  # podman and the Debian packages of the image builds, the Kubernetes programs (KWOK,
  # and the kubelet, containerd and kube-router the kind node image takes), then the images.
  scripts/install-node.sh
  scripts/build-control-plane.sh >/dev/null  # progress on stderr; stdout is its directory
  scripts/build-images.sh
  # The kind test cluster (tests/kind): the kind CLI and its node image, built here.
  scripts/install-kind.sh >/dev/null
  scripts/build-kind-node-image.sh >/dev/null
  # `cluster up --addons-from-source` (tests/kind): the registry, Kueue and Agent Sandbox images.
  scripts/build-kind-addon-images.sh >/dev/null
fi
scripts/install-shellcheck.sh
scripts/build-tools.sh >/dev/null  # helm, tofu, tflint, kubeconform, fake-gcs-server; one line each on stderr
echo "test: ruff and mypy" >&2
.venv/bin/ruff check society_sandbox ledger controller tests benchmarks examples agent_images
.venv/bin/mypy
echo "test: pytest" >&2
# Two workers (SOCIETY_TEST_WORKERS; 0 runs in this process): tests/work_units.py makes each
# top-level test folder one unit, the kind clusters' folders one unit queued first.
.venv/bin/python -m pytest -q --durations=25 -n "${SOCIETY_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder "$@"
echo "test: finished in $(( $(date +%s) - start ))s" >&2
