#!/usr/bin/env bash
# Fresh machine: install, then run the main job (a whole scripted society, local profile).
#   scripts/setup.sh         the core only (scripts/bootstrap.sh): `society run` installs the local
#                            model or OpenClaw when a roster first needs one
#   scripts/setup.sh --all   everything (scripts/bootstrap.sh --all), as CI has it
# Stdout gets exactly one JSON line (the run's result); all install output goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "$@" >&2
exec .venv/bin/society run examples/negotiation.py
