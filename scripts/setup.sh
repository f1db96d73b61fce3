#!/usr/bin/env bash
# Fresh machine: install everything, then run the main job (a whole scripted society, local profile).
# Stdout gets exactly one JSON line (the run's result); all install output goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh >&2
exec .venv/bin/society run examples/negotiation.py
