#!/usr/bin/env bash
# Run the whole test suite on a loaded machine, in a random order, several times.
#
#   bash scripts/stress_suite.sh [RUNS] [-- PYTEST_ARGS...]
#
# Each run: both cores kept busy by processes of this script's own (one per core, plus one,
# ended by a trap however the script ends), the suite in a random order with a printed seed
# (pytest-random-order: `--random-order-seed=N` replays a run's order exactly), at most
# STRESS_RUN_LIMIT seconds (default 4500). One summary line per run:
#
#   run 1/3 seed=123456 rc=0 passed=3433 failed=0 errors=0 seconds=1712 log=/tmp/...
#
# Exit status: 0 when every run passed, 1 otherwise. Run it from the project's root, in the
# virtualenv of the README's test command (pytest-random-order comes with the `test` extra).
set -uo pipefail
cd "$(dirname "$0")/.."

runs=3
if [[ $# -gt 0 && "$1" != "--" ]]; then runs="$1"; shift; fi
[[ "${1:-}" == "--" ]] && shift
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]] || (( runs > 100 )); then
    echo "stress_suite: RUNS must be a whole number from 1 to 100, not '$runs'" >&2
    exit 2
fi
limit="${STRESS_RUN_LIMIT:-4500}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/stress-suite.XXXXXX")"

busy=()
stop_load() {
    for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null; done
    busy=()
}
trap stop_load EXIT INT TERM

start_load() {
    local cores
    cores="$(nproc 2>/dev/null || echo 2)"
    for _ in $(seq 1 $((cores + 1))); do
        python3 -c 'while True: pass' &
        busy+=("$!")
    done
}

failed_runs=0
for run in $(seq 1 "$runs"); do
    seed=$(( (RANDOM << 15 | RANDOM) % 1000000 ))
    log="$logs/run-$run-seed-$seed.log"
    start_load
    started=$(date +%s)
    timeout --kill-after=60 "$limit" python -m pytest --random-order-seed="$seed" \
        --random-order-bucket="${STRESS_BUCKET:-module}" \
        "$@" >"$log" 2>&1
    rc=$?
    seconds=$(( $(date +%s) - started ))
    stop_load
    summary="$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -1)"
    count() { grep -oE "[0-9]+ $1" <<<"$summary" | head -1 | cut -d' ' -f1; }
    echo "run $run/$runs seed=$seed rc=$rc passed=$(count passed || true) failed=$(count failed || true)" \
         "errors=$(count error || true) seconds=$seconds log=$log"
    if [[ $rc -ne 0 ]]; then
        failed_runs=$((failed_runs + 1))
        grep -E '^(FAILED|ERROR) ' "$log" | head -20 | sed 's/^/    /'
    fi
done
echo "stress_suite: $((runs - failed_runs)) of $runs runs passed (logs in $logs)"
(( failed_runs == 0 ))
