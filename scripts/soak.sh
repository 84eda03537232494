#!/usr/bin/env bash
# The long soak of issue 8, for local runs (CI runs the same tests at their CI size).
#
#   scripts/soak.sh              # 20,000 seeds per fault-simulation scenario
#   SEEDS=5000 scripts/soak.sh
#
# Every fault-simulation scenario runs SEEDS seeds (pytest's per-test timeout is lifted: a soak
# of 20,000 seeds takes about 20 x the CI time). A failing seed prints the one command that
# replays it (--sim-seed=N).
set -uo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
SEEDS="${SEEDS:-20000}"
python -m pytest tests/reliability/test_fault_simulation.py -p no:cacheprovider -q \
  --sim-seeds="$SEEDS" --timeout=0
