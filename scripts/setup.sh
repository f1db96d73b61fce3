#!/usr/bin/env bash
# Fresh machine: install everything, then run the main job (a whole scripted society, local profile).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/society run examples/negotiation.py
