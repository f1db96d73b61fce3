#!/usr/bin/env bash
# Idempotent install of everything Society Runner needs into ./.venv (safe to run again).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every line of install chatter (pip, apt, the llama.cpp build) goes to stderr: stdout stays
# free for the one JSON result line that scripts/setup.sh promises.
exec 1>&2

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
fi

stamp=".venv/.society-install-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing society-runner and its dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[dev]'
  rm -f .venv/.society-install-*
  touch "$stamp"
fi

if [ -x scripts/install-llm.sh ]; then
  PYTHON=.venv/bin/python scripts/install-llm.sh
fi

if [ -x scripts/install-sandbox.sh ]; then
  scripts/install-sandbox.sh
fi

if [ -x scripts/install-openclaw.sh ]; then
  scripts/install-openclaw.sh
fi
