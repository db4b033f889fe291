#!/usr/bin/python3
"""Replacing a gunicorn worker before the old one goes: TTIN/TTOU against TERM.

    /usr/bin/python3 bench/serving/ttin.py [--every-ms 50] [--duration 15] [--runs 3]

Issue 12's study. gunicorn 20.1, 2 sync workers serving bench/serving/app.py
on 127.0.0.1, loaded with `wrk -t2 -c16 --latency`. Every --every-ms one
worker is replaced, the way recycler's process-scope recycle would do it:

  term  SIGTERM to the worker that has served longest (what recycler does:
        the master forks the replacement once it has reaped the old one)
  ttin  SIGTTIN to the master (one more worker), wait until the new worker
        runs, then SIGTTOU (one fewer): gunicorn kills its *oldest* worker,
        which need not be the one whose limit was reached
  none  nothing replaced (the baseline)

Prints req/s, p99 and how many replacements each mode completed, per run and
the median. SERVE_FAST_RECYCLE=1 in the environment gives gunicorn the hooks of
python/recycler_notify/gunicorn.py (gunicorn.conf.py). Kills only the processes it started; needs wrk and Debian's
python3-gunicorn.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def wait_serving(port, deadline):
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                if s.recv(12).startswith(b"HTTP/1."):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


def run(mode, every, duration):
    port = free_port()
    env = dict(os.environ, SERVE_BIND=f"127.0.0.1:{port}", SERVE_ACCESS_LOG="/dev/null",
               SERVE_ERROR_LOG="/dev/null")
    master = subprocess.Popen(
        ["/usr/bin/python3", "-m", "gunicorn", "-c", os.path.join(HERE, "gunicorn.conf.py")],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_serving(port, time.time() + 30):
            sys.exit("ttin.py: gunicorn did not answer")
        while len(children(master.pid)) < 2:
            time.sleep(0.01)
        wrk = subprocess.Popen(["wrk", "-t2", "-c16", f"-d{duration}s", "--latency",
                                f"http://127.0.0.1:{port}/"], stdout=subprocess.PIPE, text=True)
        done = 0
        end = time.time() + duration
        while mode != "none" and time.time() < end:
            time.sleep(every)
            workers = children(master.pid)
            if len(workers) < 2:
                continue  # the last replacement is not done yet
            if mode == "term":
                oldest = min(workers, key=lambda p: start_time(p) or 0)
                os.kill(oldest, signal.SIGTERM)
            else:
                os.kill(master.pid, signal.SIGTTIN)
                limit = time.time() + 5
                while len(children(master.pid)) < 3 and time.time() < limit:
                    time.sleep(0.001)
                os.kill(master.pid, signal.SIGTTOU)
            done += 1
        out = wrk.communicate()[0]
    finally:
        master.terminate()
        master.wait(30)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    errors = re.search(r"Socket errors: (.*)", out)
    return rps, float(p99.group(1)) * scale, done, errors.group(1) if errors else "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every-ms", type=int, default=50)
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    results = {m: [] for m in ("none", "term", "ttin")}
    for i in range(a.runs):
        for mode in results:
            r = run(mode, a.every_ms / 1000, a.duration)
            results[mode].append(r)
            print(f"  {mode:4} run {i + 1}: {r[0]:.0f} req/s, p99 {r[1]:.1f} ms, "
                  f"{r[2]} replacements, socket errors: {r[3]}", file=sys.stderr)
    print(f"| mode | req/s (median of {a.runs}) | p99 ms | replacements |")
    print("|---|---|---|---|")
    base = statistics.median(r[0] for r in results["none"])
    for mode, rs in results.items():
        rps = statistics.median(r[0] for r in rs)
        print(f"| {mode} | {rps:.0f} ({rps / base:.0%}) | "
              f"{statistics.median(r[1] for r in rs):.1f} | "
              f"{statistics.median(r[2] for r in rs):.0f} |")


if __name__ == "__main__":
    main()
