#!/usr/bin/python3
"""Three leaking trainers in one box: recycler's budget, an oomd-like kill rule, the kernel.

    sudo bench/budget_oomd.py [RECYCLER] [SECONDS]
    (defaults: RECYCLER=build/supervisor/recycler, SECONDS=75 a way; RECYCLER
    is the binary, or a build folder holding supervisor/recycler, relative to
    the repository unless absolute; root, and cgroup v1's memory hierarchy at
    /sys/fs/cgroup/memory; standard library only; about 4 minutes; KEEP=1
    keeps each way's config, recycler's log and the progress files)

Runs three examples/trainer/trainer.py workers under recycler (10 steps of
0.1 s and 2 validation steps an epoch, 16 MiB of model), leaking at different
rates, slow, medium and fast: 1, 3 and 6 MiB an epoch (0.8, 2.5 and 5 MiB/s).
None has a limit of its own; once recycler has started them, the script
writes the box, BOX = 400 MiB, to memory.limit_in_bytes of recycler's cgroup
root (v1 is hierarchical: the three share it). Unchecked they fill it in about
40 s. The same scenario, in one sitting, three ways:

  budget      recycler's top-level `budget:`: the workers' sum (`current`)
              over LIMIT = 320 MiB (80 % of the box) held `for` 1 s, or
              projected by the trend (window 10 s, warmup 2 s) to reach it
              within 10 s; `choose: fastest`, `cooldown: 3s`. It asks the
              chosen trainer for a checkpoint (SIGUSR1, the programs'
              `checkpoint:`), stops it and restarts it with RECYCLER_RESUME=1.
  kill-rule   recycler without `budget:`; the script plays oomd: every 1 s it
              reads the three worker cgroups' memory.usage_in_bytes, and when
              their sum has stayed over the same LIMIT for the same 1 s
              (oomd's memory_above detector), SIGKILLs every process of the
              largest worker's cgroup (read from its cgroup.procs: oomd's
              kill_by_memory_size), then waits the same 3 s (its
              post_action_delay). recycler restarts the worker (restart:
              always), which resumes from its last periodic checkpoint
              (--checkpoint-every 50: every 6 s of training).
  kernel      recycler alone: the kernel's OOM killer at the box's limit.

systemd-oomd itself cannot run here: PID 1 is not systemd (`ps -p 1 -o comm=`
says process_api on the machine measured) and /sys/fs/cgroup is cgroup v1
(`stat -fc %T /sys/fs/cgroup` says tmpfs, not cgroup2fs); systemd-oomd needs
both, and PSI on the unified hierarchy. The script says what it found.

The trainers resume from their latest checkpoint on every start, as real
trainers do: recycler sets RECYCLER_RESUME=1 only after a checkpoint it asked
for and saw confirmed, so the programs' `env:` sets it for every start (with
no checkpoint yet trainer.py starts from scratch). The programs are the same
in all three ways, `checkpoint:` included; only `budget:` and the kill rule
differ.

Per way: OOM kills (recycler's "OOM-killed by the kernel" lines, and the
worker cgroups' memory.oom_control `oom_kill`: v1 counts a kill in the
victim's cgroup, not in the root whose limit was hit), kills by the rule,
graceful recycles ("recycle: budget:" lines), training steps redone (each
trainer's --progress file: a run's first step against the step the run
before it had reached), steps reached (the three trainers' global steps at
the end: the work kept), seconds the workers' sum spent over LIMIT (the
script samples it every 0.5 s) and its peak, and what failed (recycler not
starting or not stopping cleanly, error lines in its log, a trainer without
progress). Then one table, the three ways side by side, with the ratios to
the budget's figures. Exit status: 0 when all three ways produced their
figures, 1 otherwise.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
MEMCG = "/sys/fs/cgroup/memory"
MiB = 1 << 20

BOX = 400 * MiB           # the cgroup root's hard limit: the box
LIMIT = 320 * MiB         # the budget's limit, and the kill rule's threshold (80 % of BOX)
HOLD = 1.0                # budget `for:`, and the kill rule's duration
COOLDOWN = 3.0            # budget `cooldown:`, and the kill rule's post-action delay
SAMPLE = 0.5              # the script's own sampling of the sum
RULE_EVERY = 1.0          # the kill rule's poll
EVERY = 50                # the trainers' periodic checkpoint, in steps
# program -> --leak-mib (per epoch: 10 steps and 2 validation steps of 0.1 s)
TRAINERS = {"slow": 1, "medium": 3, "fast": 6}
WAYS = ("budget", "kill-rule", "kernel")


def program(tmp, name, leak):
    argv = [PYTHON, "trainer.py", "--epochs", "100000", "--steps", "10", "--step-time", "0.1",
            "--model-mib", "16", "--leak-mib", str(leak), "--validation-mib", "8",
            "--validation-steps", "2", "--checkpoint", f"{tmp}/{name}.ckpt",
            "--checkpoint-every", str(EVERY), "--progress", f"{tmp}/{name}.progress"]
    command = ", ".join(f'"{a}"' for a in argv)
    return f"""  {name}:
    command: [{command}]
    cwd: {REPO}/examples/trainer
    env: {{PYTHONPATH: {REPO}/python, RECYCLER_RESUME: "1"}}
    restart: {{mode: always, backoff: {{initial: 200ms}}}}
    min_uptime: 2s
    sample_interval: 500ms
    checkpoint: {{signal: USR1, timeout: 10s}}
    stop: {{timeout: 5s}}
"""


def config(tmp, root, way):
    text = f"cgroup_root: {root}\ncontrol: {{socket: {tmp}/control.sock}}\n"
    if way == "budget":
        text += f"""budget:
  scope: workers
  metric: current
  limit: {LIMIT // MiB}MiB
  for: {HOLD:g}s
  horizon: 10s
  window: 10s
  warmup: 2s
  choose: fastest
  growth_window: 10s
  cooldown: {COOLDOWN:g}s
  interval: 500ms
"""
    text += "programs:\n" + "".join(program(tmp, n, leak) for n, leak in TRAINERS.items())
    return text


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def usage(root, name):
    text = read(f"{MEMCG}/{root}/{name}/0/memory.usage_in_bytes")
    return int(text) if text else 0


def oom_kills(root, name):
    text = read(f"{MEMCG}/{root}/{name}/0/memory.oom_control") or ""
    m = re.search(r"^oom_kill (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def procs(cgroup):
    text = read(f"{cgroup}/cgroup.procs") or ""
    return [int(p) for p in text.split()]


def kill_cgroup(cgroup):
    """SIGKILL to every process of `cgroup`, until it is empty (at most 2 s)."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        pids = procs(cgroup)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def remove_tree(root):
    """What a recycler that did not stop cleanly left: its workers (ours) killed, its cgroups removed."""
    top = f"{MEMCG}/{root}"
    if not os.path.isdir(top):
        return
    for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
        kill_cgroup(dirpath)
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


def steps(tmp, name):
    """(steps redone, global step reached), or None without progress."""
    runs = []  # [generation, first step, last step]
    for line in (read(f"{tmp}/{name}.progress") or "").splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        gen, step = parts[0], int(parts[1])
        if not runs or runs[-1][0] != gen:
            runs.append([gen, step, step])
        runs[-1][2] = step
    if not runs:
        return None
    redone = sum(max(0, runs[i - 1][2] - (runs[i][1] - 1)) for i in range(1, len(runs)))
    return redone, runs[-1][2]


def run_way(binary, way, seconds):
    tmp = tempfile.mkdtemp(prefix="recycler-bench-")
    root = f"recycler-bench-oomd-{os.getpid()}-{way}"
    fig = {"way": way, "oom": 0, "oom_cg": 0, "rule": 0, "recycles": 0, "by": {}, "redone": 0,
           "reached": 0, "over_s": 0.0, "peak": 0, "failed": []}
    proc = None
    try:
        path = os.path.join(tmp, "c.yaml")
        with open(path, "w") as f:
            f.write(config(tmp, root, way))
        check = subprocess.run([binary, "check", "-c", path], capture_output=True, text=True,
                               timeout=30)
        if check.returncode != 0:
            fig["failed"].append("check: " + (check.stdout + check.stderr).strip()[-300:])
            return fig
        log = open(os.path.join(tmp, "log"), "w+")
        proc = subprocess.Popen([binary, "run", "-c", path], stdout=log, stderr=subprocess.STDOUT)
        # The box, once the three workers are in their cgroups.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            if all(procs(f"{MEMCG}/{root}/{n}/0") for n in TRAINERS):
                break
            time.sleep(0.1)
        else:
            fig["failed"].append("the workers did not start within 20 s")
            return fig
        with open(f"{MEMCG}/{root}/memory.limit_in_bytes", "w") as f:
            f.write(str(BOX))
        start = time.monotonic()
        last = start
        over_since = None      # the kill rule's: when the sum went over LIMIT
        quiet_until = 0.0      # the kill rule's post-action delay
        next_rule = start
        tick = start
        while time.monotonic() - start < seconds:
            if proc.poll() is not None:
                fig["failed"].append(f"recycler exited early (status {proc.returncode})")
                break
            now = time.monotonic()
            sizes = {n: usage(root, n) for n in TRAINERS}
            total = sum(sizes.values())
            fig["peak"] = max(fig["peak"], total)
            if total > LIMIT:
                fig["over_s"] += now - last  # since the sample before: it was under, or over
            last = now
            if way == "kill-rule" and now >= next_rule:
                next_rule += RULE_EVERY
                if total <= LIMIT:
                    over_since = None
                elif over_since is None:
                    over_since = now
                if (over_since is not None and now - over_since >= HOLD - 0.01
                        and now >= quiet_until):
                    largest = max(sizes, key=sizes.get)
                    kill_cgroup(f"{MEMCG}/{root}/{largest}/0")
                    fig["rule"] += 1
                    fig["by"][largest] = fig["by"].get(largest, 0) + 1
                    print(f"  {way}: {now - start:5.1f} s: sum {total / MiB:.0f} MiB over "
                          f"{LIMIT // MiB} MiB for {now - over_since:.0f} s: SIGKILL {largest} "
                          f"({sizes[largest] / MiB:.0f} MiB)", flush=True)
                    over_since = None
                    quiet_until = now + COOLDOWN
            tick += SAMPLE
            time.sleep(max(0.0, tick - time.monotonic()))
        fig["oom_cg"] = sum(oom_kills(root, n) for n in TRAINERS)
    except (OSError, subprocess.SubprocessError) as e:
        fig["failed"].append(f"{type(e).__name__}: {e}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                fig["failed"].append("recycler did not stop within 40 s of SIGTERM")
                proc.kill()
                proc.wait(timeout=10)
        if proc is not None and proc.returncode not in (0, -signal.SIGTERM):
            fig["failed"].append(f"recycler's exit status {proc.returncode}")
        if os.path.isdir(f"{MEMCG}/{root}"):
            fig["failed"].append("recycler left its cgroup root behind")
            remove_tree(root)
        if proc is not None:
            log.seek(0)
            for line in log:
                if "was OOM-killed by the kernel" in line:
                    fig["oom"] += 1
                    print(f"  {way}: {line.strip()}")
                m = re.search(r" (\w+)\[0\] recycle: budget:", line)
                if m:
                    fig["recycles"] += 1
                    if way == "budget":
                        fig["by"][m.group(1)] = fig["by"].get(m.group(1), 0) + 1
                    print(f"  {way}: {line.strip()}")
                if re.match(r"\S+ \S+ error ", line):
                    fig["failed"].append(line.strip()[24:120])
            log.close()
            for n in TRAINERS:
                s = steps(tmp, n)
                if s is None:
                    fig["failed"].append(f"{n}: no progress")
                else:
                    fig["redone"] += s[0]
                    fig["reached"] += s[1]
                    fig.setdefault("per", {})[n] = s
        if os.environ.get("KEEP") == "1":
            print(f"  {way}: kept {tmp} (config, recycler's log, progress files)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return fig


def ratio(a, b):
    if b == 0:
        return "—" if a == 0 else f"∞ ({a:g}/0)"
    return f"{a / b:.2f}"


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main(argv):
    arg = argv[1] if len(argv) > 1 else os.path.join("build", "supervisor", "recycler")
    seconds = float(argv[2]) if len(argv) > 2 else 75
    binary = arg if os.path.isabs(arg) else os.path.join(REPO, arg)
    if os.path.isdir(binary):
        binary = os.path.join(binary, "supervisor", "recycler")
    if not os.access(binary, os.X_OK):
        print(f"budget_oomd.py: {binary} not found; build it first (bench/README.md)",
              file=sys.stderr)
        return 1
    if os.geteuid() != 0 or not os.path.isfile(f"{MEMCG}/memory.limit_in_bytes"):
        print(f"budget_oomd.py: needs root and cgroup v1's memory hierarchy at {MEMCG}",
              file=sys.stderr)
        return 1
    pid1 = subprocess.run(["ps", "-p", "1", "-o", "comm="], capture_output=True,
                          text=True).stdout.strip()
    fstype = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True,
                            text=True).stdout.strip()
    print(f"PID 1 is {pid1!r}, /sys/fs/cgroup is {fstype!r}: systemd-oomd "
          f"{'could' if pid1 == 'systemd' and fstype == 'cgroup2fs' else 'cannot'} run here; "
          "the kill rule is the script's")
    print(f"box {BOX // MiB} MiB; limit {LIMIT // MiB} MiB held {HOLD:g} s; cooldown "
          f"{COOLDOWN:g} s; leaks (MiB/epoch of 1.2 s) {TRAINERS}; {seconds:g} s a way")
    # A stop by SIGTERM or SIGINT still cleans up (run_way's finally).
    signal.signal(signal.SIGTERM, interrupted)
    figs = []
    for way in WAYS:
        print(f"{way}: running", flush=True)
        try:
            fig = run_way(binary, way, seconds)
        except KeyboardInterrupt:
            print(f"{way}: interrupted (recycler stopped, its cgroups gone)", file=sys.stderr)
            return 130
        figs.append(fig)
        per = ", ".join(f"{n} {s[0]} redone/{s[1]} reached" for n, s in fig.get("per", {}).items())
        print(f"{way}: {per}; acted on {fig['by'] or 'none'}", flush=True)

    rows = [
        ("OOM kills (kernel; log / cgroups)", lambda f: f"{f['oom']} / {f['oom_cg']}", None),
        ("kills by the rule", lambda f: str(f["rule"]), None),
        ("graceful recycles (budget)", lambda f: str(f["recycles"]), None),
        ("steps redone (work lost)", lambda f: str(f["redone"]), lambda f: f["redone"]),
        ("steps reached (work kept)", lambda f: str(f["reached"]), lambda f: f["reached"]),
        (f"seconds over {LIMIT // MiB} MiB", lambda f: f"{f['over_s']:.1f}",
         lambda f: round(f["over_s"], 1)),
        ("peak of the sum (MiB)", lambda f: f"{f['peak'] / MiB:.0f}", lambda f: f["peak"]),
        ("failed", lambda f: "; ".join(f["failed"])[:60] or "nothing", None),
    ]
    head = f"{'':<36}" + "".join(f"{w:>12}" for w in WAYS) + f"{'rule/budget':>14}{'kernel/budget':>15}"
    print("\n" + head)
    for label, show, value in rows:
        line = f"{label:<36}" + "".join(f"{show(f):>12}" for f in figs)
        if value:
            b, k, o = (value(f) for f in figs)
            line += f"{ratio(k, b):>14}{ratio(o, b):>15}"
        print(line)
    for f in figs:
        if f["failed"]:
            print(f"{f['way']} failed: " + "; ".join(f["failed"]))
    return 0 if all(not f["failed"] for f in figs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
