#!/usr/bin/env bash
# Idempotent install into ./.venv (safe to run again).
#   scripts/bootstrap.sh         the core: society-runner and its Python dependencies, bubblewrap
#   scripts/bootstrap.sh --all   also the dev tools (.[dev]), the local model (scripts/install-llm.sh),
#                                OpenClaw (scripts/install-openclaw.sh) and NanoClaw's Node side
#                                (scripts/install-nanoclaw.sh)
# Without --all, `society run` installs the local model, OpenClaw or NanoClaw when a roster first
# needs one.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every line of install chatter (pip, apt, the llama.cpp build) goes to stderr: stdout stays
# free for the one JSON result line that scripts/setup.sh promises.
exec 1>&2

case "${1:-}" in
  "") all=false ;;
  --all) all=true ;;
  *) echo "usage: scripts/bootstrap.sh [--all]" >&2; exit 2 ;;
esac

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
fi

# One stamp per install kind and pyproject.toml: dev (.[dev]) includes the core (.).
hash=$(sha256sum pyproject.toml | cut -c1-16)
if $all; then kind=dev target='.[dev]'; else kind=core target='.'; fi
if [ ! -f ".venv/.society-install-$kind-$hash" ] && [ ! -f ".venv/.society-install-dev-$hash" ]; then
  echo "bootstrap: installing society-runner ($target) and its dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e "$target"
  rm -f .venv/.society-install-"$kind"-*
  touch ".venv/.society-install-$kind-$hash"
fi

if [ -x scripts/install-sandbox.sh ]; then
  scripts/install-sandbox.sh
fi

if $all && [ -x scripts/install-llm.sh ]; then
  PYTHON=.venv/bin/python scripts/install-llm.sh
fi

if $all && [ -x scripts/install-openclaw.sh ]; then
  scripts/install-openclaw.sh
fi

if $all && [ -x scripts/install-nanoclaw.sh ]; then
  scripts/install-nanoclaw.sh
fi
