#!/usr/bin/env bash
# How long `recycler check` takes on large configs: parsing and validation
# should grow linearly with the number of programs.
#
#   bench/large_config.sh [RECYCLER_BINARY] [N...]
#   (defaults: build-bench/supervisor/recycler; N = 1000 16000 64000 200000)
#
# Each config has N programs `pN: {command: [/bin/true]}` (an absolute path, so
# the PATH search does not dominate). Prints N, the file size, the wall time of
# `recycler check -c FILE` (its output to /dev/null) and the time per program.
# No root needed: check does not touch cgroups beyond detecting them.
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-build-bench/supervisor/recycler}
[[ $BIN = /* ]] || BIN=$REPO/$BIN
shift || true
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(1000 16000 64000 200000)
[[ -x $BIN ]] || { echo "large_config.sh: $BIN not found; build it first" >&2; exit 1; }

TMP=$(mktemp -d /tmp/recycler-large-config.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

printf '%8s %10s %10s %12s\n' programs bytes seconds us/program
for n in "${SIZES[@]}"; do
  file=$TMP/c$n.yaml
  awk -v n="$n" 'BEGIN {
    print "programs:"
    for (i = 0; i < n; i++) printf "  p%d: {command: [/bin/true]}\n", i
  }' >"$file"
  start=$(date +%s.%N)
  "$BIN" check -c "$file" >/dev/null
  status=$?
  end=$(date +%s.%N)
  if [[ $status -ne 0 ]]; then
    echo "large_config.sh: recycler check failed on $n programs (status $status)" >&2
    exit 1
  fi
  awk -v n="$n" -v b="$(stat -c %s "$file")" -v s="$start" -v e="$end" \
    'BEGIN { printf "%8d %10d %10.2f %12.1f\n", n, b, e - s, (e - s) * 1e6 / n }'
done
