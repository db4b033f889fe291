#!/usr/bin/env bash
# recycler against hostile and unlucky input, measured.
#
#   bench/hostile.sh [BUILD_DIR] [RECYCLES]
#   (defaults: build-bench, 10; BUILD_DIR relative to the repository unless
#   absolute; run as root for real cgroups; BIN=path/to/recycler measures
#   another binary, e.g. an older build, with the same scenarios)
#
# 1. CPU per foreign notify datagram. recycler supervises 100 idle workers of
#    one program; bench_notify_flood sends datagrams to that program's notify
#    socket from outside its workers for FLOOD_SECONDS (default 5), as fast as
#    recycler takes them. recycler's time on CPU (the sum of
#    /proc/PID/task/*/schedstat) over that window, per datagram sent.
# 2. A leaking neighbour's overshoot. examples/leaky allocates RATE (200)
#    MiB/s in 1 ms steps; `memory: {metric: anon, limit: 256MiB}` recycles it
#    (memory_max 512MiB), RECYCLES times, in four settings:
#      quiet           nothing else runs
#      foreign flood   100 idle workers, and 10,000 datagrams/s to their
#                      program's socket from outside them
#      stdout flood    a worker that writes `yes` to its stdout without pause
#      stalled reader  the same worker, and recycler's stderr a pipe that
#                      nobody reads for STALL_SECONDS (20); recycler's lines are
#                      read afterwards
#    For each: how far past the limit the decisions saw the worker (median and
#    max, MiB and ms of allocation) and the OOM kills of its cgroup (must be 0).
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build-bench}
RECYCLES=${2:-10}
RATE=${RATE:-200}
FLOOD_SECONDS=${FLOOD_SECONDS:-5}
STALL_SECONDS=${STALL_SECONDS:-20}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=${BIN:-$BUILD_DIR/supervisor/recycler}
LEAKY=$BUILD_DIR/examples/leaky/leaky
FLOOD=$BUILD_DIR/bench/bench_notify_flood
for f in "$BIN" "$LEAKY" "$FLOOD"; do
  [[ -x $f ]] || { echo "hostile.sh: $f not found; build recycler, leaky and bench_notify_flood first" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/recycler-hostile.XXXXXX)
PID= READER= SENDER=
ROOT=recycler-hostile-$$
cleanup() {
  [[ -n $SENDER ]] && kill "$SENDER" 2>/dev/null
  if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    wait "$PID" 2>/dev/null
  fi
  [[ -n $READER ]] && kill "$READER" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

cpu_ns() {  # time on CPU of every thread of $1, ns
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'
}

idle_program() {
  cat <<EOF
  idle:
    command: "echo socket=\$NOTIFY_SOCKET; exec sleep 100000"
    instances: 100
    policies:
      - max_requests: {limit: 1000000000}
EOF
}

leak_program() {
  cat <<EOF
  leak:
    command: ["$LEAKY", "--rate", "${RATE}MiB", "--step", "1", "--max", "1GiB"]
    limits: {memory_max: 512MiB}
    min_uptime: 0s
    policies:
      - memory: {metric: anon, limit: 256MiB}
EOF
}

chatty_program() {
  cat <<EOF
  chatty:
    command: ["yes", "chatter chatter chatter chatter chatter chatter"]
EOF
}

# start_recycler NAME PROGRAMS... : config from the program snippets, recycler
# started with its output in $TMP/NAME.log (or, STALL=1, into a pipe read
# only after STALL_SECONDS).
start_recycler() {
  local name=$1
  shift
  { echo "cgroup_root: $ROOT-$name"; echo "programs:"; for p in "$@"; do "$p"; done; } >"$TMP/$name.yaml"
  LOG=$TMP/$name.log
  if [[ ${STALL:-0} = 1 ]]; then
    mkfifo "$TMP/$name.fifo"
    (sleep "$STALL_SECONDS"; cat) <"$TMP/$name.fifo" >"$LOG" &
    READER=$!
    "$BIN" run -c "$TMP/$name.yaml" >"$TMP/$name.fifo" 2>&1 </dev/null &
  else
    "$BIN" run -c "$TMP/$name.yaml" >"$LOG" 2>&1 </dev/null &
  fi
  PID=$!
}

stop_recycler() {
  kill -TERM "$PID"
  wait "$PID"
  local rc=$?
  PID=
  if [[ -n $READER ]]; then wait "$READER"; READER=; fi
  return $rc
}

wait_for() {  # wait_for PATTERN COUNT SECONDS
  local deadline=$((SECONDS + $3))
  while (($(grep -c -- "$1" "$LOG") < $2)); do
    if ((SECONDS > deadline)) || ! kill -0 "$PID" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
}

oom_kills() {
  local f
  for f in /sys/fs/cgroup/memory/"$ROOT-$1"/leak/0/memory.oom_control \
           /sys/fs/cgroup/"$ROOT-$1"/leak/0/memory.events; do
    [[ -r $f ]] && { awk '$1 == "oom_kill" { print $2 }' "$f"; return; }
  done
  echo "?"
}

overshoot() {  # overshoot NAME LABEL: the leaking worker's recycle lines, summarised
  local name=$2 ooms
  ooms=${OOMS:-$(oom_kills "$1")}
  grep -o 'leak\[0\] recycle: anon [0-9.]* [MG]iB' "$LOG" |
    awk '{ v = $4; if ($5 == "GiB") v *= 1024; printf "%.3f\n", v - 256 }' | sort -n |
    awk -v rate="$RATE" -v name="$name" -v ooms="$ooms" '
      { a[++n] = $1 }
      END {
        if (n == 0) { printf "  %-15s no recycle at all; OOM kills %s\n", name, ooms; exit }
        m = a[int((n + 1) / 2)]
        printf "  %-15s %2d recycles, past the limit: median %6.2f MiB (%5.1f ms), max %6.2f MiB (%5.1f ms); OOM kills %s\n",
               name, n, m, m / rate * 1000, a[n], a[n] / rate * 1000, ooms
      }'
}

echo "hostile input benchmark: $BIN"

# -- 1. CPU per foreign datagram ---------------------------------------------
start_recycler cpu idle_program
wait_for "started: pid" 100 60 || { echo "hostile.sh: workers did not start" >&2; cat "$LOG" >&2; exit 1; }
socket=$(grep -o 'idle\[0\] out | socket=.*' "$LOG" | head -1 | sed 's/.*socket=//')
before=$(cpu_ns "$PID")
sent=$("$FLOOD" "$socket" 0 "$FLOOD_SECONDS")
after=$(cpu_ns "$PID")
stop_recycler
awk -v sent="$sent" -v ns=$((after - before)) -v s="$FLOOD_SECONDS" 'BEGIN {
  printf "CPU per foreign notify datagram (100 workers): %.2f us (%d datagrams in %d s, %.0f per s taken)\n",
         ns / 1000 / sent, sent, s, sent / s }'

# -- 2. a leaking neighbour's overshoot --------------------------------------
echo "leaking neighbour at $RATE MiB/s, recycled at anon 256 MiB:"
start_recycler quiet leak_program
wait_for "leak\[0\] recycle: anon" "$RECYCLES" 120
overshoot quiet quiet
stop_recycler

start_recycler foreign idle_program leak_program
wait_for "idle\[0\] out | socket=" 1 60
socket=$(grep -o 'idle\[0\] out | socket=.*' "$LOG" | head -1 | sed 's/.*socket=//')
"$FLOOD" "$socket" 10000 600 >/dev/null &
SENDER=$!
wait_for "leak\[0\] recycle: anon" "$RECYCLES" 120
kill "$SENDER"; wait "$SENDER" 2>/dev/null; SENDER=
overshoot foreign "foreign flood"
stop_recycler

start_recycler stdout leak_program chatty_program
wait_for "leak\[0\] recycle: anon" "$RECYCLES" 120
overshoot stdout "stdout flood"
stop_recycler

STALL=1 start_recycler stalled leak_program chatty_program
sleep "$STALL_SECONDS"  # the stall itself: nobody reads recycler's stderr meanwhile
ooms=$(oom_kills stalled)
stop_recycler
OOMS=$ooms overshoot stalled "stalled reader"
grep -o 'log: [0-9]* lines of worker output dropped[^(]*' "$LOG" | head -1 | sed 's/^/                  /'
