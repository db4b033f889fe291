#!/usr/bin/env bash
# Seed 002 end to end in a container: recycler beside gunicorn's own
# --max-requests, the same image, the same 512 MiB, the same load.
#
#   sudo bench/seed002_container.sh [BUILD_DIR]        # default build-dev
#   SEED002_DURATION=60 sudo bench/seed002_container.sh build-dev
#
# The image of examples/container (build-image BUILD_DIR: mlapp, the Django
# app of seed 002, under gunicorn, one worker process with two threads;
# /predict keeps 20 MiB a request, /gradcam holds 150 MiB for 2 s) runs twice,
# one after the other, each time in a pod of its own made with --network none
# and in a container limited to 512 MiB (podman run --memory 512m):
#   A  recycler as the entrypoint, the image's default CMD
#      (examples/container/recycler.yaml: max_requests 100 + jitter 10 per
#      worker process, uss over 128 MiB for 3 s, the 320 MiB backstop);
#   B  gunicorn alone as the entrypoint, with seed 002's own recycling:
#      python3 -m gunicorn -c /srv/app/gunicorn.conf.py --bind 0.0.0.0:8000
#      --max-requests 100 --max-requests-jitter 10 (the config's
#      recycler_notify hooks send nothing without NOTIFY_SOCKET, and its
#      gunicorn hooks, which speed a worker's replacement, work alike; what
#      recycler.yaml's `env:` and `threads: 1` put in gunicorn's environment
#      is given with -e: only recycler is missing).
# Both containers have --restart on-failure (the pod keeps the network
# namespace across a restart); the table counts restarts.
# The load, from the host inside the pod's network namespace (nsenter), the
# same each time: wrk -t2 -c2 -d${SEED002_DURATION}s --timeout 10s --latency
# -s bench/seed002/mix.lua: two connections, each a request about every
# second (SEED002_DELAY_MS, default 1000, +-250), 1 in 20 to /gradcam, the
# rest to /predict; see the script for why each request has a connection of
# its own and why one thread a connection.
# Measured per way: requests completed; failed requests (wrk's socket errors,
# connect + read + write + timeout, and non-2xx responses counted by the
# script); p50/p90/p99 latency; recycles by cause (A: recycler's metrics and
# log, by policy and memory threshold; B: gunicorn's "Autorestarting worker"
# lines and workers killed by signal 9: gunicorn 20.1 logs "Worker with pid N
# was terminated due to signal 9", 21+ "Worker (pid:N) was sent SIGKILL!");
# OOM kills in the container (its v1 memory cgroup's memory.oom_control
# oom_kill, read from the host every 0.5 s and summed over container
# restarts); the peak of memory.max_usage_in_bytes; recycles and kills that
# fell while a /gradcam was in flight (podman logs' timestamps against
# mix.lua's send and answer times of each /gradcam); requests a worker began
# after its recycle signal. Prints a table of both ways
# (bench/seed002/report.py) with B/A for p99, failed requests and OOM kills.
#
# Environment: SEED002_DURATION (seconds of load a way, default 90),
# SEED002_DELAY_MS, SEED002_JITTER_MS, SEED002_SPIKE_EVERY, SEED002_SEED
# (mix.lua: another seed is another schedule of pauses and spikes),
# SEED002_KEEP=1 keeps the work folder (logs, metrics, wrk's output; printed),
# CONTAINERS_CONF (default examples/container/containers.conf).
# Needs root; exit 77 when a tool is missing. Removes the pods it made (and
# the empty cgroups podman leaves) on exit; keeps the image.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${1:-$repo/build-dev}
image=localhost/recycler-example:latest
duration=${SEED002_DURATION:-90}
keep=${SEED002_KEEP:-0}
t0=$SECONDS

skip() { echo "SKIP: $*" >&2; exit 77; }
die() { echo "seed002_container: error: $*" >&2; exit 1; }
say() { echo "[$(date +%T) +$((SECONDS - t0))s] $*" >&2; }

[ "$(id -u)" -eq 0 ] || skip "needs root (podman's root storage, the containers' cgroups)"
for tool in podman runc catatonit mmdebstrap wrk nsenter curl; do
  command -v "$tool" >/dev/null || skip "$tool not found (scripts/install-deps --test; wrk: apt-get install wrk)"
done
[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
[[ $duration =~ ^[1-9][0-9]*$ ]] || die "SEED002_DURATION=$duration is not a number of seconds"
[ -d "$build" ] || die "$build: no such build directory"
build=$(cd "$build" && pwd)
: "${CONTAINERS_CONF:=$repo/examples/container/containers.conf}"
export CONTAINERS_CONF
# For mix.lua (wrk's threads read them).
export SEED002_DELAY_MS=${SEED002_DELAY_MS:-1000}
export SEED002_JITTER_MS=${SEED002_JITTER_MS:-250}
export SEED002_SPIKE_EVERY=${SEED002_SPIKE_EVERY:-20}
export SEED002_SEED=${SEED002_SEED:-2002}
for knob in SEED002_DELAY_MS SEED002_JITTER_MS SEED002_SPIKE_EVERY SEED002_SEED; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || die "$knob=${!knob} is not a number"
done

pods=("seed002-a-$$" "seed002-b-$$")
for pod in "${pods[@]}"; do
  ! podman pod exists "$pod" || die "a pod $pod exists already"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/seed002.XXXXXX")
# conmon writes a file named "oom" into its working directory, podman's, when
# the container's cgroup has an OOM kill: podman runs from here.
cd "$work"
had_bridge=0
ip link show cni-podman0 >/dev/null 2>&1 && had_bridge=1
parent_cgroups() {
  { find /sys/fs/cgroup/*/libpod_parent /sys/fs/cgroup/libpod_parent -type d 2>/dev/null || true; } | sort
}
parent_cgroups >"$work/cgroups.before"
sampler=

cleanup() {
  local rc=$?
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
  fi
  for pod in "${pods[@]}"; do
    if podman pod exists "$pod" 2>/dev/null; then
      podman pod rm -f -t 5 "$pod" >/dev/null 2>&1 || echo "cleanup: podman pod rm $pod failed" >&2
    fi
  done
  # The cgroups this run added (deepest first; rmdir fails on one in use).
  parent_cgroups | comm -13 "$work/cgroups.before" - | sort -r | while IFS= read -r d; do
    rmdir "$d" 2>/dev/null || true
  done
  if [ "$had_bridge" = 0 ] && ip link show cni-podman0 >/dev/null 2>&1; then
    ip link delete cni-podman0 2>/dev/null || true
  fi
  cd /
  if [ "$keep" = 1 ]; then
    echo "seed002_container: kept $work" >&2
  else
    rm -rf "$work"
  fi
  say "done (exit $rc)"
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "the image: examples/container/build-image $build"
"$repo/examples/container/build-image" "$build" >/dev/null || die "examples/container/build-image failed"
version=$(podman image inspect "$image" --format '{{index .Labels "org.recycler.example.version"}}')

# sample_cgroup CTR OUT: every 0.5 s, the container's memory cgroup's
# oom_kill and max_usage_in_bytes, as "oom_kill max_usage" lines in OUT. A
# restarted container gets its cgroup made again (counters from 0): the
# report sums oom_kill over the drops. Runs until killed.
sample_cgroup() {
  local ctr=$1 out=$2 dir='' oom peak
  while :; do
    if [ -z "$dir" ] || [ ! -f "$dir/memory.oom_control" ]; then
      dir=/sys/fs/cgroup/memory$(podman inspect "$ctr" --format '{{.State.CgroupPath}}' 2>/dev/null || true)
    fi
    if [ -f "$dir/memory.oom_control" ]; then
      oom=$(awk '$1 == "oom_kill" { print $2 }' "$dir/memory.oom_control" 2>/dev/null || true)
      peak=$(cat "$dir/memory.max_usage_in_bytes" 2>/dev/null || true)
      [ -n "$oom" ] && [ -n "$peak" ] && echo "$oom $peak" >>"$out"
    fi
    sleep 0.5
  done
}

# in_net NETPID CMD...: CMD in that process's network namespace.
in_net() {
  local pid=$1
  shift
  nsenter --net="/proc/$pid/ns/net" "$@"
}

# run_way WAY: one container, its load, and what it leaves in $work/WAY.*
run_way() {
  local way=$1 pod ctr infra netpid cg limit code out deadline
  pod=seed002-$way-$$
  ctr=$pod-app
  podman pod create --name "$pod" --network none \
    --sysctl net.unix.max_dgram_qlen=512 >/dev/null || die "$way: podman pod create"
  local common=(-d --pod "$pod" --name "$ctr" --memory 512m --restart on-failure)
  if [ "$way" = a ]; then
    podman run "${common[@]}" "$image" >/dev/null || die "a: podman run (recycler)"
  else
    # What recycler.yaml gives gunicorn besides recycling: env: PYTHONUNBUFFERED,
    # threads: 1 (the thread-count variables). No NOTIFY_SOCKET.
    podman run "${common[@]}" \
      -e PYTHONUNBUFFERED=1 -e OMP_NUM_THREADS=1 -e MKL_NUM_THREADS=1 \
      -e OPENBLAS_NUM_THREADS=1 -e NUMEXPR_NUM_THREADS=1 -e VECLIB_MAXIMUM_THREADS=1 \
      --entrypoint /usr/bin/python3 "$image" \
      -m gunicorn -c /srv/app/gunicorn.conf.py --bind 0.0.0.0:8000 \
      --max-requests 100 --max-requests-jitter 10 >/dev/null || die "b: podman run (gunicorn)"
  fi
  infra=$(podman pod inspect "$pod" --format '{{.InfraContainerID}}')
  netpid=$(podman inspect "$infra" --format '{{.State.Pid}}')
  [ "$netpid" -gt 0 ] || die "$way: the pod's infra container does not run"
  cg=/sys/fs/cgroup/memory$(podman inspect "$ctr" --format '{{.State.CgroupPath}}')
  [ -f "$cg/memory.oom_control" ] || die "$way: no v1 memory cgroup at $cg (a cgroup v2 host?)"
  limit=$(cat "$cg/memory.limit_in_bytes")
  [ "$limit" = $((512 << 20)) ] || die "$way: the container's memory limit is $limit, not 512 MiB"

  # Ready: GET / answers 200 (the worker has loaded the app).
  deadline=$((SECONDS + 60))
  while :; do
    code=$(in_net "$netpid" curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
             http://127.0.0.1:8000/ 2>/dev/null || true)
    [ "$code" = 200 ] && break
    [ "$SECONDS" -lt "$deadline" ] ||
      { podman logs "$ctr" 2>&1 | tail -20 >&2; die "$way: GET / did not answer 200 within 60 s"; }
    sleep 0.2
  done
  say "$way: ready; wrk for ${duration}s"

  : >"$work/$way.cgroup"
  sample_cgroup "$ctr" "$work/$way.cgroup" &
  sampler=$!
  out=$work/$way.wrk
  if ! timeout $((duration + 60)) nsenter --net="/proc/$netpid/ns/net" \
         wrk -t2 -c2 -d"${duration}s" --timeout 10s --latency \
         -s "$here/seed002/mix.lua" http://127.0.0.1:8000 >"$out" 2>&1; then
    cat "$out" >&2
    die "$way: wrk failed"
  fi
  sleep 1 # a last sample, after the last response
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sampler=

  if [ "$way" = a ]; then
    in_net "$netpid" curl -s --max-time 5 http://127.0.0.1:9464/metrics >"$work/a.metrics" ||
      say "a: no metrics from recycler (is it running?)"
  fi
  podman inspect "$ctr" --format \
    'restarts {{.RestartCount}}
status {{.State.Status}}
oomkilled {{.State.OOMKilled}}' >"$work/$way.state"
  podman logs -t "$ctr" >"$work/$way.log" 2>&1
  podman pod rm -f -t 15 "$pod" >/dev/null 2>&1 || say "$way: podman pod rm $pod failed"
  say "$way: $(grep -c '' "$work/$way.log") log lines; $(sed -n 's/^seed002 requests //p' "$out") requests"
}

run_way a
run_way b

/usr/bin/python3 "$here/seed002/report.py" "$work" \
  --duration "$duration" --version "$version" \
  --delay-ms "$SEED002_DELAY_MS" --jitter-ms "$SEED002_JITTER_MS" \
  --spike-every "$SEED002_SPIKE_EVERY" --seed "$SEED002_SEED"
say "total $((SECONDS - t0)) s"
