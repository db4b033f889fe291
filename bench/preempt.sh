#!/usr/bin/env bash
# Preemption under Slurm: from the job's warning signal to the job requeued with the
# trainer's checkpoint on disk, and from the requeue to the next run's resume.
#
#   bench/preempt.sh [BUILD_DIR] [RUNS]
#   (defaults: BUILD_DIR=build, RUNS=3; BUILD_DIR relative to the repository unless
#   absolute; as root, with Debian's slurm-wlm and munge: scripts/install-deps --test)
#
# Runs tests/integration/slurm_itest RUNS times (gtest's repeat: a single-node cluster on
# 127.0.0.1 started for each): examples/slurm/train.sbatch with its job.yaml, USR1 to the batch step
# (`scancel -b -s USR1`, what `--signal=B:USR1@T` sends T seconds before the end), then
# recycler asks the trainer for a checkpoint, stops it, runs `scontrol requeue` and exits;
# Slurm starts the job again and the trainer resumes. Reported per run: USR1 to requeued
# (recycler's part, against the @T grace Slurm gives: 90 s in the example) and requeued
# to resumed (Slurm's scheduling, sched_interval=2 here, and the new run's start).
# Exit status: 0 when every run passed.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build}
RUNS=${2:-3}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
TEST=$BUILD_DIR/tests/integration/slurm_itest
if [[ ! -x $TEST ]]; then
  echo "preempt.sh: $TEST not found; build it first (cmake --build $BUILD_DIR --target slurm_itest)" >&2
  exit 1
fi
out=$("$TEST" --gtest_repeat="$RUNS" 2>&1)
status=$?
grep -E '^figures:|SKIPPED|FAILED' <<<"$out"
figures=$(grep -oE 'USR1 to requeued [0-9]+ ms; requeued to resumed [0-9]+ ms' <<<"$out")
if [[ -n $figures ]]; then
  median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
  echo "median of $(wc -l <<<"$figures") runs: USR1 to requeued $(awk '{print $4}' <<<"$figures" | median) ms," \
    "requeued to resumed $(awk '{print $9}' <<<"$figures" | median) ms"
fi
exit "$status"
