#!/usr/bin/env bash
# What the metrics endpoint costs recycler: CPU per scrape and RSS, with many
# sampled workers.
#
#   bench/metrics.sh [BUILD_DIR] [WORKERS] [SCRAPES]
#   (defaults: BUILD_DIR=build, WORKERS=500, SCRAPES=100; run as root)
#
# Runs BUILD_DIR/supervisor/recycler twice with one program of WORKERS `sleep`
# workers (memory_max 64MiB, a memory policy, sample_interval 1s), in a
# cgroup root of its own:
#   1. metrics off: VmRSS 5 s after the last worker started;
#   2. metrics on (127.0.0.1, port 0, read from the log): VmRSS the same way;
#      then the idle baseline (recycler's run time from
#      /proc/PID/task/*/schedstat, ns, over IDLE seconds, default 20), then
#      SCRAPES scrapes with curl, one every 200 ms (longer than the endpoint's
#      100 ms body reuse, so every scrape renders), and the run time over
#      them. CPU per scrape = (run time while scraping - the baseline scaled
#      to the same wall time) / SCRAPES. Also: the body's size and VmRSS after.
# Exit status: 0 when every scrape answered 200.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
WORKERS=${2:-500}
SCRAPES=${3:-100}
IDLE=${IDLE:-20}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
[[ -x $BIN ]] || { echo "metrics.sh: $BIN not found; build it first" >&2; exit 1; }
command -v curl >/dev/null || { echo "metrics.sh: needs curl" >&2; exit 1; }

ROOT=recycler-bench-metrics-$$
TMP=$(mktemp -d /tmp/recycler-bench.XXXXXX)
PID=

stop() {
  [[ -n $PID ]] || return 0
  kill -TERM "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  PID=
}
# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  stop
  local d
  for d in /sys/fs/cgroup/*/"$ROOT" /sys/fs/cgroup/"$ROOT"; do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT

run_ns() { cat /proc/"$PID"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
rss_kb() { sed -n 's/^VmRSS:\s*\([0-9]*\) kB/\1/p' "/proc/$PID/status"; }
now() { date +%s.%N; }

start() {  # $1: extra top-level YAML
  cat >"$TMP/c.yaml" <<YAML
log: {level: info}
cgroup_root: $ROOT
$1
programs:
  idle:
    command: ["sleep", "100000"]
    instances: $WORKERS
    limits: {memory_max: 64MiB}
    restart: {mode: never}
    sample_interval: 1s
    policies: [{memory: {metric: anon, limit: 48MiB}}]
YAML
  : >"$TMP/log"
  "$BIN" run -c "$TMP/c.yaml" >"$TMP/log" 2>&1 </dev/null &
  PID=$!
  for _ in $(seq 600); do
    [[ $(grep -c 'started: pid' "$TMP/log") -ge $WORKERS ]] && break
    kill -0 "$PID" 2>/dev/null || { cat "$TMP/log" >&2; exit 1; }
    sleep 0.1
  done
  sleep 5  # every worker sampled a few times
}

start ""
rss_off=$(rss_kb)
stop

start "metrics: {listen: 127.0.0.1:0}"
port=$(sed -n 's|.*metrics: serving http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$TMP/log" | head -1)
[[ -n $port ]] || { echo "metrics.sh: no metrics port in the log" >&2; exit 1; }
URL=http://127.0.0.1:$port/metrics
rss_on=$(rss_kb)

t0=$(now); c0=$(run_ns)
sleep "$IDLE"
t1=$(now); c1=$(run_ns)

failed=0
t2=$(now); c2=$(run_ns)
for _ in $(seq "$SCRAPES"); do
  curl -sf -o "$TMP/body" "$URL" || failed=$((failed + 1))
  sleep 0.2
done
t3=$(now); c3=$(run_ns)
rss_after=$(rss_kb)
bytes=$(wc -c <"$TMP/body")
series=$(grep -vc '^#' "$TMP/body")

awk -v w="$WORKERS" -v n="$SCRAPES" -v c0="$c0" -v c1="$c1" -v c2="$c2" -v c3="$c3" \
  -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v off="$rss_off" -v on="$rss_on" \
  -v after="$rss_after" -v bytes="$bytes" -v series="$series" -v failed="$failed" 'BEGIN {
  idle_rate = (c1 - c0) / (t1 - t0)            # ns of CPU per s, idle (sampling only)
  scraping = (c3 - c2) - idle_rate * (t3 - t2)  # ns beyond the baseline
  printf "workers %d, %d scrapes (%d failed), body %.0f KiB, %d series\n", w, n, failed, bytes / 1024, series
  printf "idle baseline: %.1f ms CPU per s\n", idle_rate / 1e6
  printf "CPU per scrape: %.2f ms (%.2f us per worker)\n", scraping / n / 1e6, scraping / n / w / 1e3
  printf "RSS: metrics off %.1f MiB, on %.1f MiB before scrapes, %.1f MiB after\n", off / 1024, on / 1024, after / 1024
}'
[[ $failed -eq 0 ]]
