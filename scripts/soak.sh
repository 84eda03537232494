#!/usr/bin/env bash
# The long soak of issue 8, for local runs (CI runs the same tests at their CI size).
#
#   scripts/soak.sh                                # 20,000 seeds per scenario, 10 min of fuzzing
#   SEEDS=5000 FUZZ_SECONDS=120 scripts/soak.sh
#
# 1. Every fault-simulation scenario runs SEEDS seeds (pytest's per-test timeout is lifted: a
#    soak of 20,000 seeds takes about 20 x the CI time). A failing seed prints the one command
#    that replays it (--sim-seed=N).
# 2. scripts/fuzz.py fuzzes every boundary target (envelopes, settings files, script files,
#    replay lines) for FUZZ_SECONDS in all; a broken contract prints the input and the seed.
# The exit status is non-zero if either part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
SEEDS="${SEEDS:-20000}"
FUZZ_SECONDS="${FUZZ_SECONDS:-600}"
status=0
python -m pytest tests/reliability/test_fault_simulation.py -p no:cacheprovider -q \
  --sim-seeds="$SEEDS" --timeout=0 || status=1
python scripts/fuzz.py --target all --seconds "$FUZZ_SECONDS" || status=1
exit "$status"
