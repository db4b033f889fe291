#!/usr/bin/python3
"""Checkpoint-to-resume downtime of the real PyTorch trainer, against a bare restart.

    sudo bench/checkpoint_resume.py [BUILD_DIR] [RECYCLES]
    (defaults: BUILD_DIR=build, RECYCLES=3; BUILD_DIR relative to the repository
    unless absolute; Debian's python3-torch; run as root for real cgroups)

Runs examples/pytorch/train.py (seed 004's validation leak, small and fast:
--batch 128 --hidden 512) under recycler twice, each time until RECYCLES
recycles have happened:

  checkpoint  the leak policy with action: checkpoint: recycler asks for a
              checkpoint (SIGUSR1), the trainer saves at its next step
              boundary (torch.save) and confirms, recycler stops it and starts
              it with RECYCLER_RESUME=1, and it loads the checkpoint.
  bare        the same leak policy with action: restart, the trainer saving
              every 10 steps on its own (--checkpoint-every 10): the restart
              comes without warning, and the steps since its last periodic
              checkpoint are done again.

Per recycle, from recycler's log (text format, millisecond stamps): decision
(the recycle line) to the checkpoint written (the trainer's own "in N ms" is
the torch.save), to its stop (the exit line), to the next start (the start
line), to the resume (the trainer's "resumed" line, once Python, torch, the
model and the data are up and the checkpoint is loaded); the whole downtime,
decision to resume; and the steps done again after it (from --progress).
Exit status: 0 when both runs gave RECYCLES recycles, 1 otherwise.
"""

import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")


def stamp(line):
    m = STAMP.match(line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f") if m else None


def config(tmp, action, extra):
    example = os.path.join(REPO, "examples", "pytorch")
    return f"""control: {{socket: {tmp}/control.sock}}
programs:
  train:
    command: [{PYTHON}, train.py, --epochs, "400", --batch, "128", --hidden, "512",
              --steps, "10", --val-batches, "20", --checkpoint, {tmp}/train.pt,
              --progress, {tmp}/progress{extra}]
    cwd: {example}
    env: {{PYTHONPATH: {REPO}/python}}
    threads: 1
    limits: {{memory_max: 320MiB}}
    sample_interval: 200ms
    min_uptime: 1s
    policies:
      - leak: {{metric: anon, window: 4s, warmup: 2s, horizon: 5s, min_slope: 60MiB/min,
               limit: 90%, action: {action}}}
    checkpoint: {{signal: USR1, timeout: 10s}}
    stop: {{timeout: 5s}}
"""


def run(binary, name, action, extra, recycles):
    tmp = tempfile.mkdtemp(prefix="recycler-bench-")
    try:
        path = os.path.join(tmp, "c.yaml")
        with open(path, "w") as f:
            f.write(config(tmp, action, extra))
        log = open(os.path.join(tmp, "log"), "w+")
        proc = subprocess.Popen([binary, "run", "-c", path], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60 + 40 * recycles
        while time.monotonic() < deadline:
            time.sleep(0.5)  # a scenario's pace, not a synchronisation: the log is read after
            log.seek(0)
            if log.read().count("resumed from checkpoint") >= recycles:
                break
        proc.terminate()
        proc.wait(timeout=30)
        log.seek(0)
        lines = log.read().splitlines()
        return report(name, lines, os.path.join(tmp, "progress"), recycles)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(name, lines, progress, recycles):
    rows = []
    cur = None
    for line in lines:
        t = stamp(line)
        if "train[0] recycle:" in line:
            cur = {"decision": t}
        elif cur is None:
            continue
        elif "checkpoint saved (asked by recycler)" in line:
            cur["saved"] = t
            cur["write_ms"] = float(re.search(r"in (\d+) ms", line).group(1))
        elif re.search(r"train\[0\] (exited|killed by)", line) and "exit" not in cur:
            cur["exit"] = t
        elif "train[0] started: pid" in line and "exit" in cur:
            cur["start"] = t
        elif "resumed from checkpoint" in line and "start" in cur:
            cur["resumed"] = t
            cur["load_ms"] = float(re.search(r"loaded in (\d+) ms", line).group(1))
            cur["resumed_at"] = int(re.search(r"global step (\d+)", line).group(1))
            rows.append(cur)
            cur = None
    # Steps done again: each generation's first step against the last step before it.
    runs = []
    with open(progress) as f:
        for entry in f:
            gen, step = entry.split()
            if not runs or runs[-1][0] != gen:
                runs.append([gen, int(step), int(step)])
            runs[-1][2] = int(step)
    redone = [max(0, runs[i - 1][2] - (runs[i][1] - 1)) for i in range(1, len(runs))]

    def ms(a, b):
        return (b - a).total_seconds() * 1000

    print(f"\n{name}: {len(rows)} recycles")
    print("  #  decision->saved (write)  saved->stopped  stopped->started  started->resumed (load)"
          "  downtime  steps redone")
    for i, r in enumerate(rows):
        saved = r.get("saved", r["decision"])
        write = f"{ms(r['decision'], saved):6.0f} ({r['write_ms']:4.0f})" if "saved" in r \
            else "     -       "
        print(f"  {i + 1}  {write:>22}  {ms(saved, r['exit']):14.0f}  {ms(r['exit'], r['start']):16.0f}"
              f"  {ms(r['start'], r['resumed']):16.0f} ({r['load_ms']:3.0f})"
              f"  {ms(r['decision'], r['resumed']):8.0f}  {redone[i] if i < len(redone) else '?':>12}")
    if rows:
        down = [ms(r["decision"], r["resumed"]) for r in rows]
        print(f"  median downtime {statistics.median(down):.0f} ms; steps redone per recycle: "
              f"{redone[:len(rows)]}")
    return len(rows) >= recycles


def main(argv):
    build = argv[1] if len(argv) > 1 else "build"
    recycles = int(argv[2]) if len(argv) > 2 else 3
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    binary = os.path.join(build, "supervisor", "recycler")
    if not os.access(binary, os.X_OK):
        print(f"checkpoint_resume.py: {binary} not found; build it first (bench/README.md)",
              file=sys.stderr)
        return 1
    if subprocess.run([PYTHON, "-c", "import torch"]).returncode != 0:
        print("checkpoint_resume.py: no python3-torch (scripts/install-deps --test)", file=sys.stderr)
        return 1
    ok = run(binary, "checkpoint (leak policy, action: checkpoint)", "checkpoint", "", recycles)
    ok &= run(binary, "bare restart (action: restart; the trainer saves every 10 steps)", "restart",
              ", --checkpoint-every, \"10\"", recycles)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
