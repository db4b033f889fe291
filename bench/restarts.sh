#!/usr/bin/env bash
# recycler's RSS and open files over many restarts of a worker.
#
#   bench/restarts.sh [BUILD_DIR] [RESTARTS]
#   (defaults: build-bench, 10000; run as root for real cgroups; BIN=path
#   measures another recycler binary)
#
# One worker, `true`, restarted at once each time it exits (restart: always,
# 1 ms backoff, no crash-loop stop). recycler's VmRSS (/proc/PID/status) and
# open files (the fewest of 50 looks at /proc/PID/fd: a running worker's
# pipes and pidfd come and go) after 100 restarts, then every quarter of
# RESTARTS. Flat is the goal: no memory or descriptor kept per run.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build-bench}
RESTARTS=${2:-10000}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=${BIN:-$BUILD_DIR/supervisor/recycler}
[[ -x $BIN ]] || { echo "restarts.sh: $BIN not found; build it first" >&2; exit 1; }

TMP=$(mktemp -d /tmp/recycler-restarts.XXXXXX)
PID=
cleanup() {
  if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID"; wait "$PID"; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

cat >"$TMP/r.yaml" <<YAML
cgroup_root: recycler-restarts-$$
log: {level: warn}
programs:
  flaky:
    command: ["sh", "-c", "echo started >&2"]
    restart:
      mode: always
      backoff: {initial: 1ms, max: 1ms, reset_after: 1h}
      crash_loop: {max: 1000000, within: 1s}
YAML
"$BIN" run -c "$TMP/r.yaml" >"$TMP/log" 2>&1 </dev/null &
PID=$!

fewest_fds() {
  local n fewest=999999 i
  for ((i = 0; i < 50; i++)); do
    n=$(ls /proc/"$PID"/fd 2>/dev/null | wc -l)
    ((n < fewest)) && fewest=$n
  done
  echo "$fewest"
}
report() {
  printf "  after %6d restarts: RSS %6d kB, open files %3d\n" "$1" \
    "$(awk '/^VmRSS/ { print $2 }' /proc/"$PID"/status)" "$(fewest_fds)"
}

echo "restarts benchmark: $BIN, $RESTARTS restarts of \`sh -c 'echo started'\`"
start=$SECONDS
for target in 100 $((RESTARTS / 4)) $((RESTARTS / 2)) $((RESTARTS * 3 / 4)) "$RESTARTS"; do
  while (($(grep -c 'err | started' "$TMP/log") < target)); do
    if ! kill -0 "$PID" 2>/dev/null || ((SECONDS - start > 1800)); then
      echo "restarts.sh: recycler stopped early; its log:" >&2; tail -20 "$TMP/log" >&2; exit 1
    fi
    sleep 0.2
  done
  report "$target"
done
echo "  $RESTARTS restarts in $((SECONDS - start)) s"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=
echo "  recycler exit status $rc"
((rc == 0))
