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
# 3. Hostile clients of the control socket and the metrics endpoint
#    (tests/support/hostile_client): the same neighbour beside a program
#    `slow` (ignores SIGTERM; stop.timeout 30s) and metrics on 127.0.0.1, for
#    CLIENT_SECONDS (10) each, in seven settings:
#      quiet            nothing else
#      status flood     one client pipelining status requests, reading answers
#      reload flood     the same with reload requests
#      restart storm    1,200 restart requests naming slow:0 4,096 times each
#      metrics hold     16 connections sending GET /metrics, then neither
#                       reading nor closing, reopened every 1.5 s
#      quiet, 100 idle  nothing else, 100 idle workers beside
#      hoarding         60 clients each queueing 40 `events` requests, unread
#                       (beside 100 idle workers: their events make each answer
#                       about 30 KB)
#    For each: the neighbour's overshoot and OOM kills, `recycler status`
#    latency (median and max of 5), scrapes answered (48, one per 100 ms),
#    recycler's peak RSS (VmHWM), the reloads it ran and the starts of slow[0].
# PARTS="1 2 3" picks the parts (default all); CLIENT_RUNS="quiet status
# reload storm hold quiet100 hoard" the settings of part 3.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build-bench}
RECYCLES=${2:-10}
RATE=${RATE:-200}
FLOOD_SECONDS=${FLOOD_SECONDS:-5}
STALL_SECONDS=${STALL_SECONDS:-20}
CLIENT_SECONDS=${CLIENT_SECONDS:-10}
CLIENT_RUNS=${CLIENT_RUNS:-quiet status reload storm hold quiet100 hoard}
PARTS=${PARTS:-1 2 3}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=${BIN:-$BUILD_DIR/supervisor/recycler}
LEAKY=$BUILD_DIR/examples/leaky/leaky
FLOOD=$BUILD_DIR/bench/bench_notify_flood
CLIENT=$BUILD_DIR/tests/integration/hostile_client
for f in "$BIN" "$LEAKY" "$FLOOD" "$CLIENT"; do
  [[ -x $f ]] || { echo "hostile.sh: $f not found; build recycler, leaky, bench_notify_flood and hostile_client first" >&2; exit 1; }
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

slow_program() {
  cat <<EOF
  slow:
    command: "trap '' TERM; exec sleep 100000"
    stop: {timeout: 30s}
    restart: {mode: never}
EOF
}

# start_recycler NAME PROGRAMS... : config from the program snippets, recycler
# started with its output in $TMP/NAME.log (or, STALL=1, into a pipe read
# only after STALL_SECONDS).
start_recycler() {
  local name=$1
  shift
  { echo "cgroup_root: $ROOT-$name"; echo "control: {socket: $TMP/$name.sock}"
    [[ -n ${METRICS:-} ]] && echo "metrics: {listen: 127.0.0.1:0}"
    echo "programs:"; for p in "$@"; do "$p"; done; } >"$TMP/$name.yaml"
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

part() { [[ " $PARTS " = *" $1 "* ]]; }

# -- 1. CPU per foreign datagram ---------------------------------------------
if part 1; then
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

fi

# -- 2. a leaking neighbour's overshoot --------------------------------------
if part 2; then
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
fi

# -- 3. hostile clients ------------------------------------------------------
if part 3; then
metrics_port() { grep -o 'serving http://127.0.0.1:[0-9]*' "$LOG" | head -1 | sed 's/.*://'; }
status_latency() {  # median and max of 5 `recycler status` calls, ms
  local i t0
  for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    timeout 60 "$BIN" status --socket "$TMP/$1.sock" >/dev/null 2>&1
    echo $((($(date +%s%N) - t0) / 1000000))
  done | sort -n | awk '{ a[++n] = $1 } END { printf "status %d ms median, %d ms max", a[3], a[5] }'
}
client_run() {  # client_run NAME LABEL [hostile_client MODE ARGS...]: one setting, measured
  local name=$1 label=$2 attacker=
  shift 2
  [[ " $CLIENT_RUNS " = *" ${name#c} "* ]] || return 0
  # shellcheck disable=SC2086
  METRICS=1 start_recycler "$name" leak_program slow_program ${EXTRA:-}
  wait_for "leak\[0\] started" 1 60 && wait_for "metrics: serving" 1 60
  if [[ $# -gt 0 ]]; then
    local args=("$@")
    if [[ $1 = hold-metrics ]]; then args+=(--port "$(metrics_port)"); else args+=(--socket "$TMP/$name.sock"); fi
    "$CLIENT" "${args[@]}" --seconds "$CLIENT_SECONDS" >"$TMP/$name.client" 2>&1 &
    attacker=$!
    sleep 1  # the attack under way before anything is measured
  fi
  local latency scraped rss ooms
  latency=$(status_latency "$name")
  scraped=$("$CLIENT" scrape --port "$(metrics_port)" --requests 48 --every 0.1 | sed 's/hostile_client: //')
  rss=$(awk '/^VmHWM:/ { print $2 " kB" }' /proc/"$PID"/status 2>/dev/null)
  if [[ -n $attacker ]]; then wait "$attacker"; else sleep "$CLIENT_SECONDS"; fi  # the quiet run lasts as long
  rss=$(awk '/^VmHWM:/ { print $2 " kB" }' /proc/"$PID"/status 2>/dev/null || echo "$rss")
  ooms=$(oom_kills "$name")
  # slow ignores SIGTERM: killed here (it does not restart), or recycler's stop waits 30 s for it.
  local f
  for f in /sys/fs/cgroup/memory/"$ROOT-$name"/slow/*/cgroup.procs /sys/fs/cgroup/"$ROOT-$name"/slow/*/cgroup.procs; do
    [[ -r $f ]] && xargs -r kill -KILL <"$f"
  done
  stop_recycler
  OOMS=$ooms overshoot "$name" "$label"
  echo "                  $latency; $scraped; peak RSS ${rss:-?}; reloads $(grep -c 'reloaded: ' "$LOG"); slow[0] starts $(grep -c 'slow\[0\] started' "$LOG")"
  [[ -s $TMP/$name.client ]] && sed 's/^hostile_client: /                  client: /' "$TMP/$name.client"
}
echo "hostile clients ($CLIENT_SECONDS s each), leaking neighbour at $RATE MiB/s recycled at anon 256 MiB:"
client_run cquiet quiet
client_run cstatus "status flood" pipeline-status
client_run creload "reload flood" pipeline-reload
client_run cstorm "restart storm" restart-storm --target slow:0 --repeat 4096 --requests 1200
client_run chold "metrics hold" hold-metrics --clients 16 --every 1.5
EXTRA=idle_program client_run cquiet100 "quiet, 100 idle"
EXTRA=idle_program client_run choard "hoarding" hoard-events --clients 60 --requests 40
fi
