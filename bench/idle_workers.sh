#!/usr/bin/env bash
# recycler's own footprint while it supervises idle workers.
#
#   bench/idle_workers.sh [BUILD_DIR] [WORKERS] [SECONDS]
#   (defaults: BUILD_DIR=build, WORKERS=50, SECONDS=60; BUILD_DIR relative to
#   the repository unless absolute; run as root for real cgroups)
#
# Runs BUILD_DIR/supervisor/recycler with one program, `idle` (sleep 100000),
# WORKERS instances, memory_max 64MiB (so each worker really gets a cgroup), in
# a cgroup root of its own (recycler-bench-<pid>), and reports:
#   - RSS: VmRSS and VmHWM (peak) of the recycler process from
#     /proc/PID/status, read 2 s after the last worker has logged "started";
#   - CPU: utime+stime from /proc/PID/stat (clock ticks, 10 ms resolution) and
#     the scheduler's run time from /proc/PID/task/*/schedstat (ns), each read
#     at the start and the end of SECONDS seconds of idling, and the context
#     switches (voluntary + involuntary) over the same window;
#   - stop: SIGTERM, the time until recycler has exited, its exit status (must
#     be 0), that every worker is gone and that the cgroup root was removed.
# With BENCH_POLICIES set (a YAML flow list, e.g.
# '[{memory: {metric: anon, limit: 48MiB}}]') the program gets those policies
# and `sample_interval: ${BENCH_INTERVAL:-1s}`, and the CPU figure is also given
# per sampled worker per sample: the cost of watching a worker.
# BENCH_TOP adds top-level YAML (e.g. 'gpu: {nvml: PATH}', bench/gpu_sampling.sh).
# With BENCH_TIMELINE=DIR as well, every sample is also recorded to DIR
# (timeline: {dir: DIR}): the cost of the timeline on top.
# With BENCH_SHAPE=programs, WORKERS programs of one instance each (idle0,
# idle1, ...: the supervisord/PM2/monit shape) instead of one program of
# WORKERS instances; each gets the same policies.
# Exit status: 0 when all that went as expected, 1 otherwise.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
WORKERS=${2:-50}
IDLE_SECONDS=${3:-60}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
if [[ ! -x $BIN ]]; then
  echo "idle_workers.sh: $BIN not found; build it first (see bench/README.md)" >&2
  exit 1
fi
if ! [[ $WORKERS =~ ^[1-9][0-9]*$ && $IDLE_SECONDS =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bench/idle_workers.sh [BUILD_DIR] [WORKERS] [SECONDS]" >&2
  exit 2
fi

ROOT=recycler-bench-$$
TMP=$(mktemp -d /tmp/recycler-bench.XXXXXX)
CONFIG=$TMP/idle.yaml
LOG=$TMP/recycler.log
PID=
SLEEP_PID=

# The cgroup root in every hierarchy that could hold it (v1: one per
# controller; v2: the unified mount, or below recycler's own cgroup, which the
# log names).
root_dirs() {
  local d
  for d in /sys/fs/cgroup/*/"$ROOT" /sys/fs/cgroup/"$ROOT" ${DISPLAY_ROOT:+"$DISPLAY_ROOT"}; do
    [[ -d $d ]] && echo "$d"
  done
}

# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  [[ -n $SLEEP_PID ]] && kill "$SLEEP_PID" 2>/dev/null
  if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 100); do is_gone "$PID" && break; sleep 0.1; done
    is_gone "$PID" || kill -KILL "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
  fi
  # Only what this run created: directories under its own, unique root.
  local d
  for d in $(root_dirs); do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Gone, or a zombie waiting for us to reap it.
is_gone() {
  local state
  state=$(sed -n 's/^State:\s*\(\S\).*/\1/p' "/proc/$1/status" 2>/dev/null)
  [[ -z $state || $state = Z ]]
}

status_kb() { sed -n "s/^$1:\s*\([0-9]*\) kB/\1/p" "/proc/$PID/status"; }
status_n() { sed -n "s/^$1:\s*\([0-9]*\)$/\1/p" "/proc/$PID/status"; }
mib() { awk -v kb="$1" 'BEGIN { printf "%.1f MiB", kb / 1024 }'; }
# utime + stime in clock ticks (fields 14 and 15, counted after the ")").
cpu_ticks() { sed 's/.*) //' "/proc/$PID/stat" | awk '{ print $12 + $13 }'; }
# Run time of every thread, in ns (the first field of schedstat).
run_ns() { cat /proc/"$PID"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
ctxt() { echo $(($(status_n voluntary_ctxt_switches) + $(status_n nonvoluntary_ctxt_switches))); }
now() { date +%s.%N; }

# One program's entry: its name and instance count.
program_yaml() {
  printf '  %s:\n    command: ["sleep", "100000"]\n    instances: %s\n' "$1" "$2"
  printf '    limits: {memory_max: 64MiB}\n    restart: {mode: never}\n'
  if [[ -n ${BENCH_POLICIES:-} ]]; then
    printf '    sample_interval: %s\n    policies: %s\n' "${BENCH_INTERVAL:-1s}" "$BENCH_POLICIES"
  fi
  if [[ -n ${BENCH_TIMELINE:-} ]]; then
    printf '    timeline: {dir: %s}\n' "$BENCH_TIMELINE"
  fi
}
{
  printf 'log: {level: info, format: text}\ncgroup_root: %s\n%s\nprograms:\n' "$ROOT" "${BENCH_TOP:-}"
  if [[ ${BENCH_SHAPE:-instances} = programs ]]; then
    for ((i = 0; i < WORKERS; i++)); do program_yaml "idle$i" 1; done
  else
    program_yaml idle "$WORKERS"
  fi
} >"$CONFIG"

: >"$LOG"
"$BIN" run -c "$CONFIG" >"$LOG" 2>&1 </dev/null &
PID=$!

# Wait (at most 30 s) for every worker's "idle[N] started: pid P" line.
started=0
for _ in $(seq 300); do
  started=$(grep -c 'idle[0-9]*\[[0-9]*\] started: pid' "$LOG")
  ((started >= WORKERS)) && break
  is_gone "$PID" && break
  sleep 0.1
done
if ((started < WORKERS)); then
  echo "idle_workers.sh: only $started of $WORKERS workers started; recycler's log:" >&2
  cat "$LOG" >&2
  exit 1
fi

MODE=$(sed -n 's/.*): cgroup \([a-z0-9]*\), worker cgroups under \(.*\)$/\1/p' "$LOG" | head -1)
DISPLAY_ROOT=$(sed -n 's/.*): cgroup [a-z0-9]*, worker cgroups under \(.*\)$/\1/p' "$LOG" | head -1)
[[ -n $MODE ]] || MODE="NOT enforced (no cgroups)"
WORKER_PIDS=$(sed -n 's/.*idle[0-9]*\[[0-9]*\] started: pid \([0-9]*\).*/\1/p' "$LOG")

sleep 2  # let start-up settle
RSS_KB=$(status_kb VmRSS)
HWM_KB=$(status_kb VmHWM)
ANON_KB=$(status_kb RssAnon)
FILE_KB=$(status_kb RssFile)
THREADS=$(status_n Threads)
FDS=$(find "/proc/$PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
LOG_LINES_BEFORE=$(wc -l <"$LOG")

T0=$(now)
TICKS0=$(cpu_ticks)
NS0=$(run_ns)
CTXT0=$(ctxt)
# In the background, so that a signal to this script interrupts the wait.
sleep "$IDLE_SECONDS" &
SLEEP_PID=$!
wait "$SLEEP_PID"
SLEEP_PID=
TICKS1=$(cpu_ticks)
NS1=$(run_ns)
CTXT1=$(ctxt)
T1=$(now)
LOG_LINES_IDLE=$(($(wc -l <"$LOG") - LOG_LINES_BEFORE))
RSS_AFTER_KB=$(status_kb VmRSS)

HZ=$(getconf CLK_TCK)
read -r ELAPSED TICK_MS RUN_MS RUN_PCT < <(awk -v t0="$T0" -v t1="$T1" -v a="$TICKS0" -v b="$TICKS1" \
  -v n0="$NS0" -v n1="$NS1" -v hz="$HZ" 'BEGIN {
    e = t1 - t0; run = (n1 - n0) / 1e6
    printf "%.1f %d %.1f %.3f\n", e, (b - a) * 1000 / hz, run, run / (e * 1000) * 100 }')

# Stop: SIGTERM, then wait (at most 30 s) for the exit.
STOP0=$(now)
kill -TERM "$PID"
for _ in $(seq 3000); do is_gone "$PID" && break; sleep 0.01; done
STOP1=$(now)
OK=1
if is_gone "$PID"; then
  wait "$PID"
  RC=$?
  STOP_S=$(awk -v a="$STOP0" -v b="$STOP1" 'BEGIN { printf "%.2f", b - a }')
  STOP_LINE="exit $RC in $STOP_S s"
  ((RC == 0)) || OK=0
else
  STOP_LINE="still running 30 s after SIGTERM"
  OK=0
fi
PID_SAVED=$PID
PID=
LEFT=0
for p in $WORKER_PIDS; do kill -0 "$p" 2>/dev/null && LEFT=$((LEFT + 1)); done
((LEFT == 0)) || { STOP_LINE+=", $LEFT workers still alive"; OK=0; }
REMAINING=$(root_dirs)
if [[ -z $REMAINING && -z $DISPLAY_ROOT ]]; then
  STOP_LINE+=", no cgroups were used"
elif [[ -z $REMAINING ]]; then
  STOP_LINE+=", cgroups removed"
else
  STOP_LINE+=", cgroup root left behind: ${REMAINING//$'\n'/ }"
  OK=0
fi

echo "recycler idle benchmark: $WORKERS workers (${BENCH_SHAPE:-instances}), $IDLE_SECONDS s, cgroup $MODE"
echo "  RSS after start: $(mib "$RSS_KB") (peak $(mib "$HWM_KB")); anon $(mib "$ANON_KB"), file $(mib "$FILE_KB")"
echo "  RSS after idle:  $(mib "$RSS_AFTER_KB")"
echo "  CPU over $ELAPSED s: $RUN_MS ms ($RUN_PCT% of one core) [schedstat]; utime+stime $TICK_MS ms"
if [[ -n ${BENCH_POLICIES:-} ]]; then
  echo "  policies:        $BENCH_POLICIES, sampled every ${BENCH_INTERVAL:-1s}${BENCH_TIMELINE:+, timeline in $BENCH_TIMELINE}"
  awk -v ms="$RUN_MS" -v w="$WORKERS" -v s="$ELAPSED" -v i="${BENCH_INTERVAL:-1s}" 'BEGIN {
    iv = i; sub(/ms$/, "", iv); if (iv == i) { sub(/s$/, "", iv); iv *= 1000 }
    n = w * s * 1000 / iv
    printf "  per sample:      %.1f us of CPU per worker per sample (%d samples)\n", ms * 1000 / n, n }'
fi
echo "  start-up CPU:    $(awk -v n="$NS0" 'BEGIN { printf "%.1f", n / 1e6 }') ms (from exec until the idle window)"
echo "  wakeups:         $((CTXT1 - CTXT0)) context switches, $LOG_LINES_IDLE log lines while idle"
echo "  process:         pid $PID_SAVED, $THREADS thread(s), $FDS open fds"
echo "  stop: $STOP_LINE"
if ((OK == 0)); then
  echo "recycler's log:" >&2
  cat "$LOG" >&2
  exit 1
fi
exit 0
