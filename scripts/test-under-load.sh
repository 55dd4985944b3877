#!/usr/bin/env bash
# The default test tier on a fresh clone of HEAD, RUNS times in a row (default 3), while
# BURNERS CPU-bound processes (default 2) load the machine. Stops at the first failure.
#   scripts/test-under-load.sh [RUNS]
# Each run's pytest output, with its 20 slowest tests, goes to $LOGS/run-N.log (LOGS
# defaults to a new temp dir).
set -euo pipefail
runs=${1:-3}
burners=${BURNERS:-2}
repo=$(cd "$(dirname "$0")/.." && pwd)
logs=${LOGS:-$(mktemp -d -t singularity-load-XXXXXX)}
clone=$(mktemp -d -t singularity-clone-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$clone"
}
trap cleanup EXIT

git clone --quiet "$repo" "$clone"
echo "fresh clone of $(git -C "$clone" rev-parse --short HEAD) in $clone; logs in $logs"
make -C "$clone" setup >"$logs/setup.log" 2>&1

for _ in $(seq "$burners"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
echo "$burners CPU burners running: ${pids[*]}"

export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --durations=20"
for run in $(seq "$runs"); do
  start=$(date +%s)
  if make -C "$clone" test >"$logs/run-$run.log" 2>&1; then
    verdict=passed
  else
    verdict=FAILED
  fi
  summary=$(grep -E '^[0-9]+ passed|^=+ .*(passed|failed)' "$logs/run-$run.log" | tail -1)
  echo "run $run: $verdict in $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg): $summary"
  [ "$verdict" = passed ] || exit 1
done
