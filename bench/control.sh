#!/usr/bin/env bash
# What the control socket costs recycler: supervisor CPU per `recycler status`
# call with 500 workers, and recycler's RSS with the socket in use.
#
#   bench/control.sh [BUILD_DIR] [WORKERS] [CALLS]
#   (defaults: build, 500, 200; BUILD_DIR relative to the repository unless
#   absolute; run as root for cgroups)
#
# One program of WORKERS `sleep` workers with a memory policy (anon, a limit
# they never reach; sample_interval 1s), so each status answer carries a real
# sample of every worker. Once all run and a few samples have passed:
#   1. idle: recycler's utime+stime (/proc/PID/stat) over a baseline period;
#   2. CALLS `recycler status --json` calls one after the other, timed; the
#      same CPU figure over them, minus the idle baseline for the same wall
#      time, divided by CALLS: the supervisor CPU one status call costs (the
#      CLI's own CPU is not counted: it is another process);
#   3. RSS before the calls and after them.
# Prints a Markdown table. Exit status: 0 when all went as expected.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
WORKERS=${2:-500}
CALLS=${3:-200}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
[[ -x $BIN ]] || { echo "control.sh: $BIN not found; build recycler first" >&2; exit 1; }

TMP=$(mktemp -d /tmp/recycler-control-bench.XXXXXX)
LOG=$TMP/recycler.log
SOCK=$TMP/ctl.sock
PID=
cleanup() {
  if [[ -n $PID ]]; then
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

cat >"$TMP/bench.yaml" <<EOF
cgroup_root: recycler-control-bench-$$
log: {level: warn}
control: {socket: $SOCK}
programs:
  idle:
    command: ["sleep", "100000"]
    instances: $WORKERS
    sample_interval: 1s
    policies:
      - memory: {metric: anon, limit: 1GiB}
EOF

"$BIN" run -c "$TMP/bench.yaml" >"$LOG" 2>&1 &
PID=$!

# CPU ticks (utime + stime) of recycler.
ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status"; }
now() { date +%s.%N; }
HZ=$(getconf CLK_TCK)

# Every worker running (polled with a deadline).
for _ in $(seq 600); do
  running=$("$BIN" status --socket "$SOCK" --json 2>/dev/null | grep -o '"state":"running"' | wc -l)
  [[ $running -eq $WORKERS ]] && break
  sleep 0.1
done
if [[ ${running:-0} -ne $WORKERS ]]; then
  echo "control.sh: only ${running:-0} of $WORKERS workers running" >&2
  cat "$LOG" >&2
  exit 1
fi
sleep 3  # a few samples of every worker, so that status carries them

rss_before=$(rss_kib)
t0=$(now); c0=$(ticks)
sleep 10
t1=$(now); c1=$(ticks)
idle_rate=$(echo "($c1 - $c0) / ($t1 - $t0)" | bc -l)  # ticks per second, idle

bytes=0
t2=$(now); c2=$(ticks)
for _ in $(seq "$CALLS"); do
  out=$("$BIN" status --socket "$SOCK" --json) || { echo "control.sh: status failed" >&2; exit 1; }
  bytes=${#out}
done
t3=$(now); c3=$(ticks)
rss_after=$(rss_kib)

wall=$(echo "$t3 - $t2" | bc -l)
busy=$(echo "($c3 - $c2) - $idle_rate * $wall" | bc -l)
per_call_ms=$(echo "$busy * 1000 / $HZ / $CALLS" | bc -l)
idle_pct=$(echo "$idle_rate * 100 / $HZ" | bc -l)

printf '| workers | status calls | wall per call (CLI included) | supervisor CPU per call | idle CPU | answer size | RSS before | RSS after |\n'
printf '|---|---|---|---|---|---|---|---|\n'
printf '| %d | %d | %.1f ms | %.2f ms | %.2f %% of a core | %d KiB | %d MiB | %d MiB |\n' \
  "$WORKERS" "$CALLS" "$(echo "$wall * 1000 / $CALLS" | bc -l)" "$per_call_ms" "$idle_pct" \
  $((bytes / 1024)) $((rss_before / 1024)) $((rss_after / 1024))
exit 0
