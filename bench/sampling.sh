#!/usr/bin/env bash
# Supervisor CPU per sampled worker, at several worker counts: idle_workers.sh
# with a memory policy on `anon` (cgroup files only), sampled every second.
#
#   bench/sampling.sh [BUILD_DIR] [SECONDS] [WORKERS...]
#   (defaults: BUILD_DIR=build, SECONDS=30, WORKERS=50 1000; run as root)
#
# For each count, one line: µs of recycler's CPU per worker per sample,
# recycler's CPU as % of one core, its RSS after the idle window, open fds and
# the stop. BENCH_POLICIES and BENCH_INTERVAL override the policy and the
# interval; BENCH_SHAPE=programs makes each worker a program of its own (see
# idle_workers.sh). Exit status: 1 when a run failed.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
SECONDS_IDLE=${2:-30}
shift 2 2>/dev/null || shift $#
COUNTS=("$@")
((${#COUNTS[@]})) || COUNTS=(50 1000)
export BENCH_POLICIES=${BENCH_POLICIES:-'[{memory: {metric: anon, limit: 48MiB}}]'}
export BENCH_INTERVAL=${BENCH_INTERVAL:-1s}
status=0
echo "sampling benchmark: $BENCH_POLICIES every $BENCH_INTERVAL, $SECONDS_IDLE s per count, shape ${BENCH_SHAPE:-instances}"
for n in "${COUNTS[@]}"; do
  if ! out=$("$REPO/bench/idle_workers.sh" "$BUILD_DIR" "$n" "$SECONDS_IDLE" 2>&1); then
    echo "$out" >&2
    status=1
    continue
  fi
  us=$(sed -n 's/.*per sample: *\([0-9.]*\) us.*/\1/p' <<<"$out")
  pct=$(sed -n 's/.*ms (\([0-9.]*\)% of one core).*/\1/p' <<<"$out")
  rss=$(sed -n 's/.*RSS after idle: *\(.*\)$/\1/p' <<<"$out")
  fds=$(sed -n 's/.*thread(s), \([0-9]*\) open fds.*/\1/p' <<<"$out")
  stop=$(sed -n 's/.*stop: \(.*\)$/\1/p' <<<"$out")
  printf '  %5d workers: %5s us per worker per sample, CPU %s%% of one core, RSS %s, %s fds; stop: %s\n' \
    "$n" "$us" "$pct" "$rss" "$fds" "$stop"
done
exit "$status"
