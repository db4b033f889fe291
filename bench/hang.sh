#!/usr/bin/env bash
# Hang detection latency: recycler's watchdog against gunicorn's worker timeout,
# in the same run.
#
#   bench/hang.sh [BUILD_DIR] [HANGS]
#   (defaults: BUILD_DIR=build, HANGS=5; BUILD_DIR relative to the repository
#   unless absolute; run as root for real cgroups)
#
# recycler: one program whose worker (Debian's /usr/bin/python3) sends
# WATCHDOG=1 three times, 0.2 s apart, then hangs in a sleep; `watchdog:
# {timeout: 2s}`. Every generation does the same, so HANGS hangs come from one
# run. Measured per hang, on the worker's own clock: from its last WATCHDOG=1
# to the SIGTERM of its restart (a handler writes the time), less the 2 s
# timeout: how late the hang is acted on. Once with the default
# sample_interval (1s) and once with 100ms: a timer due when the run has been
# silent for the timeout samples it then, so the interval should not matter.
# gunicorn (Debian's, sync worker, `--timeout 2`): a request whose handler
# hangs in a sleep, HANGS times (one after the other, on 127.0.0.1 only); from
# the start of the hang to the worker's SIGABRT (its worker_abort hook writes
# the time), less the timeout. gunicorn's arbiter checks its workers' heartbeat
# files about once a second.
# Reported: the delay past the timeout per hang (ms), its median and the
# largest, and the ratio of the medians (recycler / gunicorn).
# Exit status: 0 when every run gave HANGS figures, 1 otherwise.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
HANGS=${2:-5}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
PY=/usr/bin/python3
if [[ ! -x $BIN ]]; then
  echo "hang.sh: $BIN not found; build it first (see bench/README.md)" >&2
  exit 1
fi
if ! [[ $HANGS =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bench/hang.sh [BUILD_DIR] [HANGS]" >&2
  exit 2
fi
if ! "$PY" -c 'import gunicorn' 2>/dev/null; then
  echo "hang.sh: Debian's python3-gunicorn is needed (scripts/install-deps --test)" >&2
  exit 1
fi

TIMEOUT_S=2
TMP=$(mktemp -d /tmp/recycler-hang.XXXXXX)
ROOT=recycler-bench-$$
PIDS=()

# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  local d
  for d in /sys/fs/cgroup/*/"$ROOT" /sys/fs/cgroup/"$ROOT"; do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Lines "A B" (times in s) in FILE: "hang A" then "end B", one pair per hang;
# prints each delay past the timeout (ms), then "median MAX".
delays() {
  "$PY" - "$1" "$TIMEOUT_S" <<'PY'
import statistics, sys
start, out = None, []
for line in open(sys.argv[1]):
    kind, t = line.split()
    if kind == "hang":
        start = float(t)
    elif start is not None:
        out.append((float(t) - start - float(sys.argv[2])) * 1000)
        start = None
print(" ".join("%.0f" % d for d in out))
print("%.0f %.0f %d" % (statistics.median(out), max(out), len(out)) if out else "- - 0")
PY
}

# Waits until FILE has N "end" lines (at most 60 s).
wait_ends() {
  for _ in $(seq 600); do
    [[ -f $1 ]] && (($(grep -c '^end ' "$1") >= $2)) && return 0
    sleep 0.1
  done
  return 1
}

cat >"$TMP/worker.py" <<'PY'
import os, signal, socket, sys, time
log = open(sys.argv[1], "a", buffering=1)
def on_term(*_):
    log.write("end %.6f\n" % time.time())
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(3):
    if i:
        time.sleep(0.2)
    s.sendto(b"WATCHDOG=1", os.environ["NOTIFY_SOCKET"])
log.write("hang %.6f\n" % time.time())
while True:
    time.sleep(3600)
PY

OK=1
echo "hang detection: the delay past a ${TIMEOUT_S}s timeout, per hang (ms)"
declare -A MEDIAN
for interval in 1s 100ms; do
  out=$TMP/recycler-$interval.times
  cat >"$TMP/c.yaml" <<EOF
cgroup_root: $ROOT
programs:
  hung:
    command: [$PY, $TMP/worker.py, $out]
    sample_interval: $interval
    watchdog: {timeout: ${TIMEOUT_S}s}
    min_uptime: 0s
EOF
  "$BIN" run -c "$TMP/c.yaml" >"$TMP/recycler-$interval.log" 2>&1 </dev/null &
  PIDS+=($!)
  wait_ends "$out" "$HANGS" || OK=0
  kill -TERM "${PIDS[-1]}"
  wait "${PIDS[-1]}"
  unset 'PIDS[-1]'
  mapfile -t r < <(delays "$out")
  read -r med max n <<<"${r[1]}"
  ((n >= HANGS)) || OK=0
  MEDIAN[$interval]=$med
  printf '  recycler watchdog, sample_interval %-5s %s; median %s, max %s\n' "$interval:" "${r[0]}" "$med" "$max"
done

# gunicorn: a hanging handler, --timeout 2, one sync worker.
cat >"$TMP/app.py" <<'PY'
import os, time
def app(environ, start_response):
    with open(os.environ["HANG_LOG"], "a") as log:
        log.write("hang %.6f\n" % time.time())
    time.sleep(3600)
PY
cat >"$TMP/gconf.py" <<'PY'
import os, time
def worker_abort(worker):
    with open(os.environ["HANG_LOG"], "a") as log:
        log.write("end %.6f\n" % time.time())
PY
gout=$TMP/gunicorn.times
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HANG_LOG=$gout "$PY" -m gunicorn --chdir "$TMP" -c "$TMP/gconf.py" -w 1 --timeout "$TIMEOUT_S" \
  -b "127.0.0.1:$PORT" app:app >"$TMP/gunicorn.log" 2>&1 &
PIDS+=($!)
"$PY" - "$PORT" "$HANGS" "$gout" <<'PY' || OK=0
import http.client, sys, time
port, hangs, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def ends():
    try:
        return sum(1 for line in open(log) if line.startswith("end "))
    except FileNotFoundError:
        return 0
deadline = time.monotonic() + 120
while ends() < hangs and time.monotonic() < deadline:
    before = ends()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.connect()
    except OSError:  # not listening yet, or its next worker is booting
        time.sleep(0.05)
        continue
    try:
        c.request("GET", "/")
        c.getresponse()
    except (OSError, http.client.HTTPException):
        pass
    while ends() == before and time.monotonic() < deadline:
        time.sleep(0.05)
sys.exit(0 if ends() >= hangs else 1)
PY
kill -TERM "${PIDS[-1]}"
wait "${PIDS[-1]}"
unset 'PIDS[-1]'
mapfile -t g < <(delays "$gout")
read -r gmed gmax gn <<<"${g[1]}"
((gn >= HANGS)) || OK=0
printf '  gunicorn --timeout %s (sync worker):         %s; median %s, max %s\n' "$TIMEOUT_S" "${g[0]}" "$gmed" "$gmax"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
echo "  median delay, recycler / gunicorn: $(ratio "${MEDIAN[1s]}" "$gmed") (sample_interval 1s)," \
  "$(ratio "${MEDIAN[100ms]}" "$gmed") (100ms)"
((OK)) || echo "hang.sh: a run gave fewer than $HANGS hangs; its log is gone with $TMP" >&2
((OK)) && exit 0 || exit 1
