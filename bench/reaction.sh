#!/usr/bin/env bash
# How fast recycler reacts when a worker's memory crosses a policy limit.
#
#   bench/reaction.sh [BUILD_DIR] [RECYCLES] [RATE_MIB_S] [SAMPLE_INTERVAL]
#   (defaults: build, 10, 200, 60s; run as root for real cgroups)
#
# Runs examples/leaky (allocating and touching RATE MiB/s in 1 ms steps) under
# BUILD_DIR/supervisor/recycler with memory_max 512MiB and one policy,
# `memory: {metric: anon, limit: 256MiB}`, until it has been recycled RECYCLES
# times. Each recycle line states the anon memory the decision saw; what was
# allocated past the limit, divided by the rate, is the reaction time from the
# crossing to the decision (to within one 1 ms step). With the default
# sample_interval of 60 s only the kernel fast path can be this quick; pass
# e.g. 1s to compare with plain sampling (expect a spread up to one interval
# and, at high rates, OOM kills). Reports min, median and max, and the OOM
# kills (must be 0).
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
RECYCLES=${2:-10}
RATE=${3:-200}
INTERVAL=${4:-60s}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
LEAKY=$BUILD_DIR/examples/leaky/leaky
for f in "$BIN" "$LEAKY"; do
  [[ -x $f ]] || { echo "reaction.sh: $f not found; build recycler and leaky first" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/recycler-reaction.XXXXXX)
LOG=$TMP/recycler.log
PID=
cleanup() {
  if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    wait "$PID"
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

cat >"$TMP/r.yaml" <<EOF
cgroup_root: recycler-reaction-$$
programs:
  leak:
    command: ["$LEAKY", "--rate", "${RATE}MiB", "--step", "1", "--max", "1GiB"]
    limits: {memory_max: 512MiB}
    sample_interval: $INTERVAL
    min_uptime: 0s
    policies:
      - memory: {metric: anon, limit: 256MiB}
EOF

"$BIN" run -c "$TMP/r.yaml" >"$LOG" 2>&1 </dev/null &
PID=$!
deadline=$((SECONDS + 30 + RECYCLES * (256 / RATE + 2)))
while (($(grep -c 'recycle: anon' "$LOG") < RECYCLES)); do
  if ((SECONDS > deadline)) || ! kill -0 "$PID" 2>/dev/null; then
    echo "reaction.sh: only $(grep -c 'recycle: anon' "$LOG") recycles; recycler's log:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.2
done
kill -TERM "$PID"
wait "$PID"
RC=$?
PID=

OOMS=$(grep -c 'OOM' "$LOG")
echo "reaction benchmark: leak ${RATE} MiB/s, limit 256 MiB, sample_interval $INTERVAL, $RECYCLES recycles"
grep -o 'recycle: anon [0-9.]* [MG]iB' "$LOG" |
  awk -v rate="$RATE" '{ v = $3; if ($4 == "GiB") v *= 1024; printf "%.3f\n", (v - 256) / rate * 1000 }' |
  sort -n | awk '{ a[NR] = $1 } END {
    printf "  past the limit:  min %.2f ms, median %.2f ms, max %.2f ms of allocation\n", a[1], a[int((NR + 1) / 2)], a[NR] }'
echo "  OOM kills:       $OOMS; recycler exit status $RC"
((OOMS == 0 && RC == 0))
