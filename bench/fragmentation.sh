#!/usr/bin/env bash
# RSS of a fragmenting worker under glibc's defaults, `allocator: {arena_max: 2}`
# and `allocator: {preload: jemalloc}` (and jemalloc told to give memory back
# sooner), as recycler's own probes see it.
#
#   bench/fragmentation.sh [BUILD_DIR] [SECONDS]
#   (defaults: build, 30; BUILD_DIR relative to the repository unless absolute;
#   RSS comes from /proc, so root is not needed)
#
# Runs four programs side by side under BUILD_DIR/supervisor/recycler, each
# BUILD_DIR/examples/fragment/fragment with its defaults (8 threads serving
# 256 KiB requests of small objects, one 32 MiB request every second in turn,
# 1 object in 256 kept for a while: about 1 MiB live), differing only in
# `allocator:`:
#   defaults        (none)
#   arena_max: 2    MALLOC_ARENA_MAX=2
#   jemalloc        LD_PRELOAD of Debian's libjemalloc2
#   jemalloc, tuned jemalloc_conf "background_thread:true,dirty_decay_ms:1000"
# Each has a timeline (sample_interval 1s) and a memory policy on rss with a
# limit it never reaches, so that recycler samples each worker's RSS. After
# SECONDS it stops recycler and prints, as a Markdown table, each worker's
# RSS at 5, 10, 20 and 30 s after it started (the last sample at or before;
# BENCH_AT="5 10 20 30" to choose) and the live data the worker last
# reported. Checks first that each worker saw the variables its allocator
# sets. Needs libjemalloc2 (scripts/install-deps --test). Takes SECONDS + a
# few seconds. Exit status: 0 when all went as expected, 1 otherwise.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
DURATION=${2:-30}
AT=${BENCH_AT:-5 10 20 30}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BIN=$BUILD_DIR/supervisor/recycler
FRAGMENT=$BUILD_DIR/examples/fragment/fragment
for f in "$BIN" "$FRAGMENT"; do
  [[ -x $f ]] || {
    echo "fragmentation.sh: $f not found; build recycler and fragment first" >&2
    exit 1
  }
done
if ! [[ $DURATION =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bench/fragmentation.sh [BUILD_DIR] [SECONDS]" >&2
  exit 2
fi

TMP=$(mktemp -d /tmp/recycler-fragmentation.XXXXXX)
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

TUNED=background_thread:true,dirty_decay_ms:1000
# name|allocator (YAML flow map)|what the table calls it
SETTINGS=(
  "defaults|{}|glibc defaults"
  "arena_max_2|{arena_max: 2}|\`arena_max: 2\`"
  "jemalloc|{preload: jemalloc}|\`preload: jemalloc\`"
  "jemalloc_tuned|{preload: jemalloc, jemalloc_conf: \"$TUNED\"}|\`preload: jemalloc\` + \`jemalloc_conf\`*"
)
{
  echo "cgroup_root: recycler-fragmentation-$$"
  echo "programs:"
  for s in "${SETTINGS[@]}"; do
    IFS='|' read -r name allocator _ <<<"$s"
    cat <<EOF
  $name:
    command: ["$FRAGMENT"]
    allocator: $allocator
    restart: {mode: never}
    sample_interval: 1s
    timeline: {dir: "$TMP/timelines"}
    policies:
      - memory: {metric: rss, limit: 64GiB}   # never fires: makes recycler sample RSS
EOF
  done
} >"$TMP/r.yaml"

if ! "$BIN" check -c "$TMP/r.yaml" >"$TMP/check.log" 2>&1; then
  echo "fragmentation.sh: the config does not check:" >&2
  cat "$TMP/check.log" >&2
  exit 1
fi
"$BIN" run -c "$TMP/r.yaml" >"$LOG" 2>&1 </dev/null &
PID=$!
sleep "$DURATION"
sleep 1.5 # the last sample of the last second
kill -TERM "$PID"
wait "$PID"
RC=$?
PID=

status=0
expect() { # program, text its first line must contain
  if ! grep -F "$1[0] out | fragment: " "$LOG" | head -1 | grep -qF -- "$2"; then
    echo "fragmentation.sh: $1 did not see $2" >&2
    status=1
  fi
}
expect defaults "MALLOC_ARENA_MAX= LD_PRELOAD="
expect arena_max_2 "MALLOC_ARENA_MAX=2 "
expect jemalloc "libjemalloc.so.2"
expect jemalloc_tuned "libjemalloc.so.2"

# The RSS column of a timeline at the last sample at or before $2 seconds.
rss_at() {
  awk -F, -v at="$2" '
    NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    $col["t"] + 0 <= at + 0 && $col["rss"] != "" { rss = $col["rss"] }
    END { if (rss == "") print "—"; else printf "%.0f MiB", rss / 1048576 }' "$1"
}

echo "fragmentation benchmark: examples/fragment, RSS after N s (recycler's samples), ${DURATION} s run"
header="| allocator |"
rule="|---|"
for t in $AT; do
  header+=" $t s |"
  rule+="---:|"
done
echo "$header live |"
echo "$rule---:|"
for s in "${SETTINGS[@]}"; do
  IFS='|' read -r name _ label <<<"$s"
  csv=$TMP/timelines/$name.0.csv
  row="| $label |"
  for t in $AT; do row+=" $(rss_at "$csv" "$t") |"; done
  live=$(grep -F "$name[0] out | fragment: live" "$LOG" | tail -1 | sed -E 's/.*live ([0-9.]+ MiB).*/\1/')
  echo "$row ${live:-—} |"
done
echo "* jemalloc_conf: \"$TUNED\""
echo "recycler exit status $RC"
((RC == 0 && status == 0))
