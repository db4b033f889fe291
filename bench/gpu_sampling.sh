#!/usr/bin/env bash
# What GPU figures cost: bench/sampling.sh with a memory policy on `gpu`,
# through the fake NVML driver the tests build (tests/support/fake_nvml),
# which lists FAKE_PROCESSES processes on one GPU (as a busy 8-GPU node
# might), beside the same run on `anon` alone. The fake reads its files on
# every call, so the NVML query itself costs more than a real driver's
# cached answer would; it runs on libuv's thread pool, not the loop, and
# counts in recycler's CPU all the same.
#
#   bench/gpu_sampling.sh [BUILD_DIR] [SECONDS] [WORKERS...]
#   (defaults: BUILD_DIR=build, SECONDS=30, WORKERS=50 1000; run as root)
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
BUILD=$(cd "$BUILD_DIR" && pwd)
FAKE_LIB=$BUILD/tests/support/fake_nvml/fake_nvml/libnvidia-ml.so.1
[ -f "$FAKE_LIB" ] || { echo "gpu_sampling: $FAKE_LIB not built (a build with tests)" >&2; exit 1; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/bench-nvml.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR/procs"
echo $((80 << 30)) > "$DIR/devices"
for ((i = 0; i < ${FAKE_PROCESSES:-64}; i++)); do
  echo "0 $(((i + 1) << 20))" > "$DIR/procs/$((4000000 + i))"
done
export RECYCLER_FAKE_NVML_DIR=$DIR
shift 0
echo "== anon only"
BENCH_POLICIES='[{memory: {metric: anon, limit: 48MiB}}]' "$REPO/bench/sampling.sh" "$@"
echo "== gpu (fake NVML, ${FAKE_PROCESSES:-64} processes listed)"
BENCH_TOP="gpu: {nvml: $FAKE_LIB}" \
  BENCH_POLICIES='[{memory: {metric: anon, limit: 48MiB}}, {memory: {metric: gpu, limit: 90%}}]' \
  "$REPO/bench/sampling.sh" "$@"
echo "NVML queries answered: $(wc -l < "$DIR/calls" 2>/dev/null || echo 0)"
