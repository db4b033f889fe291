#!/usr/bin/env bash
# monit beside recycler: the same idle workers watched for memory by both.
#
#   bench/monit_peer.sh [BUILD_DIR] [WORKERS] [SECONDS]
#   (defaults: BUILD_DIR=build, WORKERS=50, SECONDS=20; run as root;
#   monit from scripts/install-deps --bench)
#
# monit (Debian's) gets WORKERS `check process` entries, one per worker (the
# shape monit users write), each `matching` its own `sleep` and with `if
# totalmem > 48 MB then restart`, `set daemon 1`: one cycle a second, as
# recycler samples with `sample_interval: 1s`. The sleeps are started here,
# outside both, so neither start-up is measured. Then recycler runs the same
# shape through idle_workers.sh (BENCH_SHAPE=programs, a memory policy on
# anon at 48 MiB every 1 s) in the same sitting. For each: µs of CPU per
# watched worker per cycle (scheduler run time over SECONDS, after a 3 s
# warm-up) and RSS (VmRSS), and the ratios.
# Exit status: 0 when both ran, 1 otherwise.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
WORKERS=${2:-50}
IDLE_SECONDS=${3:-20}
if ! command -v monit >/dev/null; then
  echo "monit_peer.sh: monit not installed (scripts/install-deps --bench)" >&2
  exit 1
fi
TMP=$(mktemp -d /tmp/recycler-monit.XXXXXX)
SLEEPS=()
MONIT_PID=
cleanup() {
  [[ -n $MONIT_PID ]] && kill "$MONIT_PID" 2>/dev/null && wait "$MONIT_PID" 2>/dev/null
  for p in "${SLEEPS[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

run_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' /proc/"$1"/status; }

# A distinct argument per sleep, so that each check matches one process.
base=$((7000000 + RANDOM))
{
  echo "set daemon 1"
  echo "set logfile $TMP/monit.log"
  echo "set idfile $TMP/monit.id"
  echo "set statefile $TMP/monit.state"
  echo "set pidfile $TMP/monit.pid"
  for ((i = 0; i < WORKERS; i++)); do
    arg=$((base + i))
    sleep "$arg" &
    SLEEPS+=($!)
    echo "check process w$i matching \"^sleep $arg\$\""
    echo "  start program = \"/bin/sh -c 'sleep $arg &'\""
    echo "  if totalmem > 48 MB then restart"
  done
} >"$TMP/monitrc"
chmod 600 "$TMP/monitrc"
monit -I -c "$TMP/monitrc" >"$TMP/monit.out" 2>&1 &
MONIT_PID=$!
sleep 3  # its first cycles (a warm-up, not synchronisation: nothing waits on it)
if ! kill -0 "$MONIT_PID" 2>/dev/null; then
  echo "monit_peer.sh: monit did not start:" >&2
  cat "$TMP/monit.out" >&2
  exit 1
fi
t0=$(run_ns "$MONIT_PID")
sleep "$IDLE_SECONDS"
t1=$(run_ns "$MONIT_PID")
monit_rss=$(rss_kib "$MONIT_PID")
monit_us=$(awk -v a="$t0" -v b="$t1" -v n="$WORKERS" -v s="$IDLE_SECONDS" \
  'BEGIN { printf "%.1f", (b - a) / 1000 / n / s }')
cleanup
trap - EXIT

out=$(BENCH_SHAPE=programs BENCH_INTERVAL=1s \
  BENCH_POLICIES='[{memory: {metric: anon, limit: 48MiB}}]' \
  "$REPO/bench/idle_workers.sh" "$BUILD_DIR" "$WORKERS" "$IDLE_SECONDS" 2>&1) || {
  echo "$out" >&2
  exit 1
}
rec_us=$(sed -n 's/.*per sample: *\([0-9.]*\) us.*/\1/p' <<<"$out")
rec_rss=$(sed -n 's/.*RSS after idle: *\([0-9.]*\) MiB.*/\1/p' <<<"$out")
echo "monit beside recycler: $WORKERS workers, one check (program) each, memory every 1 s, $IDLE_SECONDS s"
awk -v mu="$monit_us" -v mr="$monit_rss" -v ru="$rec_us" -v rr="$rec_rss" 'BEGIN {
  printf "  monit %s: %6.1f us per worker per cycle, RSS %.1f MiB\n", "5.33", mu, mr / 1024
  printf "  recycler:    %6.1f us per worker per sample, RSS %.1f MiB\n", ru, rr
  if (ru > 0) printf "  recycler / monit: CPU %.2f, RSS %.2f\n", ru / mu, rr / (mr / 1024)
}'
