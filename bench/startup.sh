#!/usr/bin/env bash
# Start-up time with many programs, and a SIGTERM in the middle of it.
#
#   bench/startup.sh [BUILD_DIR] [PROGRAMS...]
#   (defaults: BUILD_DIR=build, PROGRAMS=100 1000 4000; BUILD_DIR relative to
#   the repository unless absolute; run as root for real cgroups)
#
# For each N in PROGRAMS: writes a config with N programs p0..pN-1 (one
# instance each of `sleep 100000`, memory_max 64MiB so each gets a real
# cgroup, restart never) in a cgroup root of its own (recycler-bench-<pid>),
# runs BUILD_DIR/supervisor/recycler, and reports:
#   - start: the time from exec until the last "pN[0] started" line, by the
#     log's own timestamps (ms), and per program (µs);
#   - start-up CPU: recycler's run time (schedstat) once all have started;
#   - stop: SIGTERM, the time until recycler exits, its status, that every
#     worker is gone and that the cgroup root was removed; and the time until
#     the last worker's "stopped" line (by the log's timestamps): what is left
#     until the exit is recycler's own clean-up.
# With BENCH_TERM_AT=K (0 < K < N) the SIGTERM comes instead as soon as the
# K-th worker has logged "started", in the middle of the start-up: then the
# time until exit (target < 1 s), how many programs had started, and the same
# checks that nothing is left behind.
# Beside each N, the floor on this machine in the same run: the same N
# `sleep 100000`s spawned back to back by one small process (posix_spawn, no
# cgroups, no pipes, no log), then SIGKILLed and reaped; the ratio says how
# much recycler adds to what the kernel and the workers themselves cost
# (BENCH_FLOOR=0 skips it; needs Debian's /usr/bin/python3).
# As root the open-file limit is raised first (about 6 fds per program).
# Exit status: 0 when every check held, 1 otherwise.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
shift || true
COUNTS=("$@")
((${#COUNTS[@]})) || COUNTS=(100 1000 4000)
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
if [[ ! -x $BIN ]]; then
  echo "startup.sh: $BIN not found; build it first (see bench/README.md)" >&2
  exit 1
fi
for n in "${COUNTS[@]}"; do
  if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: bench/startup.sh [BUILD_DIR] [PROGRAMS...]" >&2
    exit 2
  fi
done
TERM_AT=${BENCH_TERM_AT:-}
# About 6 fds per program (its notify socket, the worker's output pipes, pidfd
# and cgroup directory): 4000 programs need about 24,000, more than a hard
# limit of 20,000 (raised here when permitted).
ulimit -Hn 1048576 2>/dev/null && ulimit -n 1048576

ROOT=recycler-bench-$$
TMP=$(mktemp -d /tmp/recycler-bench.XXXXXX)
PID=
DISPLAY_ROOT=

root_dirs() {
  local d
  for d in /sys/fs/cgroup/*/"$ROOT" /sys/fs/cgroup/"$ROOT" ${DISPLAY_ROOT:+"$DISPLAY_ROOT"}; do
    [[ -d $d ]] && echo "$d"
  done
}

is_gone() {
  local state
  state=$(sed -n 's/^State:\s*\(\S\).*/\1/p' "/proc/$1/status" 2>/dev/null)
  [[ -z $state || $state = Z ]]
}

# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 300); do is_gone "$PID" && break; sleep 0.1; done
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

# Timestamps and waits in the measured stretches cost no process of their own
# (EPOCHREALTIME is bash's clock; the stop is a plain wait): on a two-core
# machine a poll that forks grep, sed or sleep every few milliseconds takes CPU
# from recycler and its workers and so inflates what it measures.

# A log line's timestamp ("2026-11-22 07:11:39.423 ...") in seconds since the epoch.
line_time() { date -d "$(cut -c1-23 <<<"$1")" +%s.%N; }
run_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }

FLOOR_PY=/usr/bin/python3
# The floor: N posix_spawns of the workers' command, then SIGKILL and reap.
# Prints "SPAWN_MS REAP_MS".
floor() {
  "$FLOOR_PY" - "$1" <<'PY'
import os, signal, sys, time
n = int(sys.argv[1])
t0 = time.monotonic()
pids = [os.posix_spawnp("sleep", ["sleep", "100000"], os.environ) for _ in range(n)]
t1 = time.monotonic()
for p in pids:
    os.kill(p, signal.SIGKILL)
for p in pids:
    os.waitpid(p, 0)
t2 = time.monotonic()
print(f"{(t1 - t0) * 1000:.0f} {(t2 - t1) * 1000:.0f}")
PY
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }'; }

OK=1
echo "recycler start-up benchmark${TERM_AT:+, SIGTERM once $TERM_AT workers have started}"
for N in "${COUNTS[@]}"; do
  CONFIG=$TMP/startup-$N.yaml
  LOG=$TMP/recycler-$N.log
  {
    echo "log: {level: info, format: text}"
    echo "cgroup_root: $ROOT"
    echo "programs:"
    for ((i = 0; i < N; i++)); do
      printf '  p%d: {command: [sleep, "100000"], limits: {memory_max: 64MiB}, restart: {mode: never}}\n' "$i"
    done
  } >"$CONFIG"
  : >"$LOG"
  WANT=$N
  [[ -n $TERM_AT ]] && WANT=$TERM_AT
  T0=$EPOCHREALTIME
  "$BIN" run -c "$CONFIG" >"$LOG" 2>&1 </dev/null &
  PID=$!
  started=0
  # At most 120 s for every start. Polled every 0.1 s only: the time comes from
  # the log's own timestamps, so polling more often would only load the machine.
  for _ in $(seq 1200); do
    started=$(grep -c '^.\{24\}info    p[0-9]*\[0\] started: pid' "$LOG")
    ((started >= WANT)) && break
    is_gone "$PID" && break
    grep -q '\] failed to start: ' "$LOG" && break  # e.g. out of fds: see the log
    sleep 0.1
  done
  if [[ -n $TERM_AT ]]; then
    STOP0=$EPOCHREALTIME
    kill -TERM "$PID"
  fi
  line=$(grep '^.\{24\}info    p[0-9]*\[0\] started: pid' "$LOG" | tail -1)
  if ((started < WANT)) || [[ -z $line ]]; then
    echo "startup.sh: only $started of $WANT programs started; recycler's log:" >&2
    tail -50 "$LOG" >&2
    OK=0
    break
  fi
  if [[ -z $TERM_AT ]]; then
    CPU_MS=$(awk -v n="$(run_ns "$PID")" 'BEGIN { printf "%.0f", n / 1e6 }')
    START_MS=$(ms_between "$T0" "$(line_time "$line")")
    DISPLAY_ROOT=$(sed -n 's/.*): cgroup [a-z0-9]*, worker cgroups under \(.*\)$/\1/p' "$LOG" | head -1)
    STOP0=$EPOCHREALTIME
    kill -TERM "$PID"
  fi
  # A plain wait (no polling) for whichever ends first: recycler, or 30 s.
  sleep 30 &
  TIMER=$!
  FIRST=
  wait -n -p FIRST "$PID" "$TIMER"
  RC=$?
  STOP1=$EPOCHREALTIME
  TIMED_OUT=0
  if [[ $FIRST == "$TIMER" ]]; then
    TIMED_OUT=1
    kill -KILL "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
  else
    kill "$TIMER" 2>/dev/null
    wait "$TIMER" 2>/dev/null
  fi
  DISPLAY_ROOT=$(sed -n 's/.*): cgroup [a-z0-9]*, worker cgroups under \(.*\)$/\1/p' "$LOG" | head -1)
  if ((TIMED_OUT == 0)); then
    STOP_MS=$(ms_between "$STOP0" "$STOP1")
    STOP="exit $RC in $STOP_MS ms"
    # When the last worker was stopped, by the log: the rest of the time to
    # exit is recycler's own clean-up (its cgroups and notify sockets).
    last=$(grep '^.\{24\}info    p[0-9]*\[0\] stopped$' "$LOG" | tail -1)
    [[ -n $last ]] && STOP+=" (the last worker stopped after $(ms_between "$STOP0" "$(line_time "$last")") ms)"
    ((RC == 0)) || OK=0
  else
    STOP="still running 30 s after SIGTERM"
    OK=0
  fi
  PID=
  LEFT=0
  while read -r p; do
    kill -0 "$p" 2>/dev/null && LEFT=$((LEFT + 1))
  done < <(sed -n 's/.*p[0-9]*\[0\] started: pid \([0-9]*\).*/\1/p' "$LOG")
  ((LEFT == 0)) || { STOP+=", $LEFT workers still alive"; OK=0; }
  if [[ -n $(root_dirs) ]]; then
    STOP+=", cgroup root left behind"
    OK=0
  elif [[ -n $DISPLAY_ROOT ]]; then
    STOP+=", cgroups removed"
  else
    STOP+=", no cgroups were used"
  fi
  if [[ -n $TERM_AT ]]; then
    ALL=$(grep -c 'p[0-9]*\[0\] started: pid' "$LOG")
    printf '  %5d programs: SIGTERM after %d started; %d started in all; %s\n' "$N" "$TERM_AT" "$ALL" "$STOP"
  else
    printf '  %5d programs: all started %6d ms after exec (%4d us per program), start-up CPU %d ms; stop: %s\n' \
      "$N" "$START_MS" "$((START_MS * 1000 / N))" "$CPU_MS" "$STOP"
    if [[ ${BENCH_FLOOR:-1} != 0 && -x $FLOOR_PY ]]; then
      read -r FLOOR_START FLOOR_STOP < <(floor "$N")
      printf '  %5d sleeps, posix_spawn (the floor): spawned in %6d ms, killed and reaped in %d ms; recycler / floor: start %s, stop %s\n' \
        "$N" "$FLOOR_START" "$FLOOR_STOP" "$(ratio "$START_MS" "$FLOOR_START")" "$(ratio "$STOP_MS" "$FLOOR_STOP")"
    fi
  fi
  if ((OK == 0)); then
    echo "recycler's log (last lines):" >&2
    tail -30 "$LOG" >&2
    break
  fi
done
((OK == 1))
