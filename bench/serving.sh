#!/usr/bin/env bash
# Serving under load: gunicorn's own request recycling against recycler's,
# side by side in one sitting (issue 12).
#
#   bench/serving.sh [BUILD_DIR]          (default build; run as root for real cgroups)
#   RUNS=3 DURATION=20 ROWS="a b c0 c d e" bench/serving.sh build
#
# Debian's gunicorn 20.1 (/usr/bin/python3 -m gunicorn), 2 sync workers,
# serving bench/serving/app.py ("ok"), loaded on 127.0.0.1 with
# `wrk -t2 -c16 -d${DURATION}s --latency`. Rows:
#   a   gunicorn, no recycling
#   b   gunicorn --max-requests 200 --max-requests-jitter 50
#   c0  gunicorn under recycler, each request reported (post_request hook +
#       python/recycler_notify) to a max_requests policy whose
#       limit is never reached: what counting costs
#   c   under recycler, max_requests: {limit: 200, jitter: 50, scope: process}
#   d   (c) + the whole server recycled every 5 s (max_lifetime), with
#       listen: (recycler holds the socket) and recycle: {mode: restart}
#   e   (d) with recycle: {mode: surge}
# Each run goes through every row in turn (a, b, c0, ... then again), each
# server on a port of its own, so that a slow spell of the machine spreads
# over the rows. Prints a markdown table (bench/serving/report.py): every run
# and the median per row, req/s and p99 against (a), wrk's non-2xx and socket
# errors, recycles done, requests served per recycled pid (from gunicorn's
# access log), how many served more than their drawn limit + 5, and
# recycler's own CPU time and context switches over the load, per recycle.
# QLEN=512 sets net.unix.max_dgram_qlen (how many datagrams the kernel queues
# on one notify socket; systemd sets 512 at boot, the kernel's default is 10)
# for the run and puts the old value back at the end; the table names it.
# FAST_RECYCLE=1 gives every row's gunicorn the hooks of
# python/recycler_notify/gunicorn.py (a worker that leaves skips the
# interpreter's teardown; the master forks without its pause); the table says so.
# LOAD=closed_loop loads each row with bench/serving/closed_loop.py (16
# connections, a closed loop in Python that times each request itself)
# instead of wrk, to check wrk's latency figures; the table names it.
# LIMIT=200 JITTER=50 are the request limit of (b) to (e); BATCH_BELOW=N puts
# RECYCLER_REQUESTS_BATCH_BELOW=N in the env: of (c0) to (e) (default: none,
# recycler's own, the smallest limit), e.g. LIMIT=250 JITTER=0 BATCH_BELOW=250
# against BATCH_BELOW=225 for what one report a process saves against about 25.
# KEEP=1 keeps the logs (the directory is printed). Kills only the processes
# it started; recycler gets a cgroup_root of its own, removed at the end.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=${BIN:-$BUILD_DIR/supervisor/recycler}
RUNS=${RUNS:-3}
DURATION=${DURATION:-20}
ROWS=${ROWS:-a b c0 c d e}
FAST_RECYCLE=${FAST_RECYCLE:-0}
LOAD=${LOAD:-wrk}
LIMIT=${LIMIT:-200}
JITTER=${JITTER:-50}
BATCH_BELOW=${BATCH_BELOW:-}
for knob in LIMIT JITTER; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || { echo "serving.sh: $knob=${!knob} is not a number" >&2; exit 2; }
done
[[ -z $BATCH_BELOW || $BATCH_BELOW =~ ^([0-9]+|unlimited)$ ]] ||
  { echo "serving.sh: BATCH_BELOW=$BATCH_BELOW: a number or unlimited" >&2; exit 2; }
export LIMIT JITTER  # for report.py's labels
[[ $LOAD = wrk || $LOAD = closed_loop ]] || { echo "serving.sh: LOAD=$LOAD: wrk or closed_loop" >&2; exit 2; }
PYTHON=/usr/bin/python3
SERVING=$REPO/bench/serving

for tool in wrk curl; do
  command -v $tool >/dev/null || { echo "serving.sh: $tool not found (scripts/install-deps --test)" >&2; exit 1; }
done
$PYTHON -c 'import gunicorn' 2>/dev/null ||
  { echo "serving.sh: Debian's python3-gunicorn is not installed (scripts/install-deps --test)" >&2; exit 1; }
for row in $ROWS; do
  case $row in
    a | b) ;;
    c0 | c | d | e) [[ -x $BIN ]] || { echo "serving.sh: $BIN not found; build recycler first" >&2; exit 1; } ;;
    *) echo "serving.sh: unknown row $row (a b c0 c d e)" >&2; exit 2 ;;
  esac
done

QLEN_FILE=/proc/sys/net/unix/max_dgram_qlen
QLEN_BEFORE=$(cat $QLEN_FILE 2>/dev/null || echo unknown)
if [[ -n ${QLEN:-} ]]; then
  [[ $QLEN =~ ^[0-9]+$ ]] || { echo "serving.sh: QLEN=$QLEN is not a number" >&2; exit 2; }
  echo "$QLEN" >$QLEN_FILE || { echo "serving.sh: cannot set $QLEN_FILE (root?)" >&2; exit 1; }
fi

ROOT=recycler-servebench-$$
TMP=$(mktemp -d /tmp/recycler-serving.XXXXXX)
PID=  # the server this script started last: gunicorn's master or recycler

root_dirs() {
  local d
  for d in /sys/fs/cgroup/*/"$ROOT" /sys/fs/cgroup/"$ROOT"; do [[ -d $d ]] && echo "$d"; done
}

# Gone, or a zombie waiting for us to reap it.
is_gone() {
  local state
  state=$(sed -n 's/^State:\s*\(\S\).*/\1/p' "/proc/$1/status" 2>/dev/null)
  [[ -z $state || $state = Z ]]
}

# SIGTERM, then SIGKILL after $2 seconds (tenths of a second polled).
stop_server() {
  [[ -n $PID ]] || return 0
  if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null
    local i
    for ((i = 0; i < $1 * 10; i++)); do is_gone "$PID" && break; sleep 0.1; done
    is_gone "$PID" || { echo "serving.sh: pid $PID ignored SIGTERM for $1 s; killed" >&2; kill -KILL "$PID" 2>/dev/null; }
  fi
  wait "$PID" 2>/dev/null
  PID=
}

# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  stop_server 30
  # Only what this run created: directories under its own, unique root.
  local d
  for d in $(root_dirs); do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done
  [[ -n ${QLEN:-} && $QLEN_BEFORE != unknown ]] && echo "$QLEN_BEFORE" >$QLEN_FILE
  if [[ ${KEEP:-0} = 1 ]]; then echo "serving.sh: logs kept in $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port no socket uses (listening or connected: gunicorn's bind would fail),
# from a range of this run's own below the kernel's ephemeral ports.
NEXT_PORT=${PORT_BASE:-$((10000 + $$ % 20000))}
port_used() {
  if command -v ss >/dev/null; then
    [[ -n $(ss -Htan "( sport = :$1 )" 2>/dev/null) ]]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
free_port() {
  while port_used "$NEXT_PORT"; do NEXT_PORT=$((NEXT_PORT + 1)); done
  PORT=$NEXT_PORT
  NEXT_PORT=$((NEXT_PORT + 1))
}

# Polls until the server answers 200 (at most 30 s) or dies.
wait_serving() {
  local i
  for ((i = 0; i < 300; i++)); do
    curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$PORT/" 2>/dev/null | grep -q 200 && return 0
    is_gone "$PID" && return 1
    sleep 0.1
  done
  return 1
}

recycler_config() {  # ROW
  local listen='' recycle='' policies="      - max_requests: {limit: $LIMIT, jitter: $JITTER, scope: process}"
  case $1 in
    c0) policies="      - max_requests: {limit: 1000000000, scope: process}  # counts, never fires" ;;
    d | e)
      listen="    listen: [\"127.0.0.1:$PORT\"]"
      policies+=$'\n'"      - max_lifetime: {after: 5s}"
      # gunicorn's master says READY=1 before it forks; its workers say it
      # once they have loaded the app (SERVE_READY): wait for one of those.
      [[ $1 = e ]] && recycle="    recycle: {mode: surge, ready_from: child, ready_timeout: 60s}"
      ;;
  esac
  cat <<YAML
cgroup_root: $ROOT
log: {level: info, format: text}
programs:
  web:
    command: ["$PYTHON", "-m", "gunicorn", "-c", "$SERVING/gunicorn.conf.py"]
    env:
      SERVE_BIND: "127.0.0.1:$PORT"
      SERVE_ACCESS_LOG: "$RUN_DIR/access.log"
      SERVE_ERROR_LOG: "$RUN_DIR/error.log"
      SERVE_COUNT: "1"
      SERVE_READY: "1"
      SERVE_FAST_RECYCLE: "$FAST_RECYCLE"
$([[ -n $BATCH_BELOW ]] && echo "      RECYCLER_REQUESTS_BATCH_BELOW: \"$BATCH_BELOW\"")
    stop: {signal: TERM, timeout: 10s}  # longer than graceful_timeout (5 s)
$listen
$recycle
    policies:
$policies
YAML
}

start_server() {  # ROW
  local gunicorn=("$PYTHON" -m gunicorn -c "$SERVING/gunicorn.conf.py")
  case $1 in
    a | b)
      [[ $1 = b ]] && gunicorn+=(--max-requests "$LIMIT" --max-requests-jitter "$JITTER")
      SERVE_BIND=127.0.0.1:$PORT SERVE_ACCESS_LOG=$RUN_DIR/access.log \
        SERVE_ERROR_LOG=$RUN_DIR/error.log SERVE_FAST_RECYCLE=$FAST_RECYCLE \
        "${gunicorn[@]}" </dev/null >"$RUN_DIR/stdout.log" 2>&1 &
      ;;
    *)
      recycler_config "$1" >"$RUN_DIR/recycler.yaml"
      "$BIN" run -c "$RUN_DIR/recycler.yaml" </dev/null >"$RUN_DIR/recycler.log" 2>&1 &
      ;;
  esac
  PID=$!
}

# recycler's own CPU time (utime + stime, ms) and context switches so far:
# report.py takes the difference over the load, per recycle.
CLK_TCK=$(getconf CLK_TCK)
recycler_cpu() {
  local stat
  read -r -a stat <<<"$(sed 's/^.*) //' "/proc/$PID/stat" 2>/dev/null)"
  [[ ${#stat[@]} -gt 13 ]] || return 0
  echo "cpu_ms $(((stat[11] + stat[12]) * 1000 / CLK_TCK))"
  awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print "switches", n}' "/proc/$PID/status"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "serving benchmark: $RUNS run(s) of ${DURATION}s per row, rows: $ROWS; $(nproc) CPUs, load $LOAD_BEFORE" >&2
for ((run = 1; run <= RUNS; run++)); do
  for row in $ROWS; do
    RUN_DIR=$TMP/$row-$run
    mkdir -p "$RUN_DIR"
    free_port
    start_server "$row"
    if ! wait_serving; then
      echo "serving.sh: row $row run $run: nothing answered on port $PORT; its logs:" >&2
      tail -n 20 "$RUN_DIR"/*.log >&2
      exit 1
    fi
    [[ $row = a || $row = b ]] || recycler_cpu >"$RUN_DIR/cpu-before"
    if [[ $LOAD = wrk ]]; then
      wrk -t2 -c16 -d"${DURATION}s" --latency "http://127.0.0.1:$PORT/" >"$RUN_DIR/wrk.txt" 2>&1
    else  # prints what report.py reads from wrk's output
      $PYTHON "$SERVING/closed_loop.py" "$PORT" --connections 16 --duration "$DURATION" \
        >"$RUN_DIR/wrk.txt" 2>&1
    fi
    [[ $row = a || $row = b ]] || recycler_cpu >"$RUN_DIR/cpu-after"
    stop_server 30
    printf '  %-3s run %d: %s\n' "$row" "$run" "$(grep -h 'Requests/sec' "$RUN_DIR/wrk.txt")" >&2
  done
done

echo
echo "\`RUNS=$RUNS DURATION=$DURATION bench/serving.sh\`, $(date -u +%F), $(nproc) CPUs, load from $LOAD, FAST_RECYCLE=$FAST_RECYCLE, LIMIT=$LIMIT JITTER=$JITTER${BATCH_BELOW:+ BATCH_BELOW=$BATCH_BELOW}, net.unix.max_dgram_qlen $(cat $QLEN_FILE 2>/dev/null || echo unknown), load average before $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg)"
echo
# shellcheck disable=SC2086  # one argument per row
$PYTHON "$SERVING/report.py" "$TMP" $ROWS
