#!/usr/bin/python3
"""A gang recycle of two torch.distributed ranks, beside torchrun's own restart.

    sudo bench/gang_recycle.py [BUILD_DIR] [ROUNDS]
    (defaults: BUILD_DIR=build, ROUNDS=3; BUILD_DIR relative to the repository
    unless absolute; Debian's python3-torch; run as root for real cgroups)

Runs examples/pytorch/ddp_train.py (DDP over gloo, 2 ranks, CPU) ROUNDS times
in each of three ways, each round one recycle or restart:

  gang-leak     recycler, `gang: true`, one slot per rank; rank 1 leaks (in its
                first run only) until its memory policy (action: checkpoint)
                fires: both ranks checkpoint, stop, start, resume.
  gang-crash    recycler, the same gang; rank 1 exits with status 1 before
                step 150 of its first run: recycler stops rank 0 (no
                checkpoint: its peer is gone), restarts both, and they resume
                from rank 0's last periodic checkpoint (every 25 steps).
  torchrun      torchrun --max_restarts 1 without recycler (the peer), the
                same crash: torchrun's agent stops rank 0 and restarts both,
                which resume from the same periodic checkpoint.

Per round: the decision (recycler's "gang recycle" line; for torchrun, the
crash: rank 1's last step) to both ranks training again (the first step of
the next run of each, from --progress, which stamps every step); and the
steps done again (the first run's last step less the step resumed from).
Exit status: 0 when every round of every way gave its figures, 1 otherwise.
"""

import datetime
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "pytorch")
PYTHON = "/usr/bin/python3"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")
CRASH_AT = 150
EVERY = 25


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(tmp, extra):
    return ["ddp_train.py", "--steps", "400", "--step-time", "0.01", "--checkpoint",
            f"{tmp}/ddp.pt", "--progress", f"{tmp}/progress"] + extra


def progress(tmp):
    """{rank: [(generation, step, time)]}"""
    out = {}
    try:
        with open(f"{tmp}/progress") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4:
                    out.setdefault(int(parts[0]), []).append(
                        (parts[1], int(parts[2]), float(parts[3])))
    except FileNotFoundError:
        pass
    return out


def figures(tmp, decided_at):
    """(seconds from the decision to both ranks training again, steps redone), or None."""
    steps = progress(tmp)
    if set(steps) != {0, 1}:
        return None
    again, last_first, first_second = [], 0, None
    for rank, rows in steps.items():
        first = [r for r in rows if r[0] == "1"]
        second = [r for r in rows if r[0] == "2"]
        if not first or not second:
            return None
        last_first = max(last_first, max(r[1] for r in first))
        first_second = second[0][1] if first_second is None else min(first_second, second[0][1])
        again.append(second[0][2])
    if decided_at is None:  # torchrun: the crash, after rank 1's last step
        decided_at = max(r[2] for r in steps[1] if r[0] == "1")
    return max(again) - decided_at, last_first - (first_second - 1)


def gang_config(tmp, port, extra):
    argv = ", ".join(f'"{a}"' for a in [PYTHON] + train_args(tmp, extra))
    return f"""control: {{socket: {tmp}/control.sock}}
programs:
  ddp:
    command: [{argv}]
    cwd: {EXAMPLE}
    env: {{PYTHONPATH: {REPO}/python}}
    instances: 2
    gang: {{master: "127.0.0.1:{port}"}}
    threads: 1
    limits: {{memory_max: 1GiB}}
    restart: {{mode: on-failure, backoff: {{initial: 100ms}}}}
    sample_interval: 200ms
    policies:
      - memory: {{metric: anon, limit: 260MiB, action: checkpoint}}
    checkpoint: {{signal: USR1, timeout: 20s}}
    stop: {{timeout: 5s}}
"""


def gang_round(binary, extra):
    tmp = tempfile.mkdtemp(prefix="recycler-bench-")
    try:
        path = os.path.join(tmp, "c.yaml")
        with open(path, "w") as f:
            f.write(gang_config(tmp, free_port(), extra))
        log = open(os.path.join(tmp, "log"), "w+")
        proc = subprocess.Popen([binary, "run", "-c", path], stdout=log, stderr=subprocess.STDOUT)
        decided, result = None, None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and result is None:
            time.sleep(0.2)
            log.seek(0)
            for line in log:
                if decided is None and "gang recycle:" in line:
                    t = STAMP.match(line)
                    decided = datetime.datetime.strptime(
                        t.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            if decided is not None:
                result = figures(tmp, decided)
        proc.terminate()
        proc.wait(timeout=60)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def torchrun_round():
    tmp = tempfile.mkdtemp(prefix="recycler-bench-")
    try:
        env = dict(os.environ, PYTHONPATH=f"{REPO}/python", OMP_NUM_THREADS="1")
        for var in ("NOTIFY_SOCKET", "RECYCLER_GENERATION", "RECYCLER_RESUME"):
            env.pop(var, None)
        argv = ["/usr/bin/torchrun", "--standalone", "--nproc_per_node", "2", "--max_restarts",
                "1", "--redirects", "1", "--tee", "1", "--log_dir", f"{tmp}/logs"]
        argv += train_args(tmp, ["--crash-rank", "1", "--crash-at-step", str(CRASH_AT),
                                 "--checkpoint-every", str(EVERY)])
        log = open(os.path.join(tmp, "log"), "w")
        proc = subprocess.Popen(argv, cwd=EXAMPLE, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        result = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and result is None:
            time.sleep(0.2)
            result = figures(tmp, None)
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    build = argv[1] if len(argv) > 1 else "build"
    rounds = int(argv[2]) if len(argv) > 2 else 3
    binary = os.path.join(build if os.path.isabs(build) else os.path.join(REPO, build),
                          "supervisor", "recycler")
    ways = {
        "gang-leak": lambda: gang_round(binary, ["--leak-rank", "1", "--leak-mib", "1",
                                                 "--leak-runs", "1"]),
        "gang-crash": lambda: gang_round(binary, ["--crash-rank", "1", "--crash-at-step",
                                                  str(CRASH_AT), "--checkpoint-every",
                                                  str(EVERY)]),
        "torchrun": torchrun_round,
    }
    ok = True
    medians = {}
    print(f"{'way':<12} {'round':>5} {'decision to both training again':>32} {'steps redone':>13}")
    for name, way in ways.items():
        took = []
        for i in range(rounds):
            r = way()
            if r is None:
                print(f"{name:<12} {i + 1:>5} {'no figures':>32}")
                ok = False
                continue
            took.append(r[0])
            print(f"{name:<12} {i + 1:>5} {r[0] * 1000:>29.0f} ms {r[1]:>13}")
        if took:
            medians[name] = statistics.median(took)
    for name, m in medians.items():
        print(f"median {name}: {m * 1000:.0f} ms")
    if "gang-crash" in medians and "torchrun" in medians:
        print(f"gang-crash / torchrun: {medians['gang-crash'] / medians['torchrun']:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
