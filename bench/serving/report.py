"""Reads the runs bench/serving.sh left in a directory and prints the tables.

    /usr/bin/python3 bench/serving/report.py DIR ROW...

DIR holds one folder per run, ROW-RUN (e.g. c0-2), each with wrk.txt (wrk's
output), access.log (gunicorn's, the worker pid as "<1234>" first on each
line), error.log (gunicorn's own) and, under recycler, recycler.log and
cpu-before/cpu-after (recycler's CPU time and context switches around the load:
"cpu_ms N" and "switches N" lines).
Standard library only.
"""

import os
import re
import statistics
import sys

LIMIT = os.environ.get("LIMIT", "200")  # bench/serving.sh's knobs
JITTER = os.environ.get("JITTER", "50")
LABELS = {
    "a": "(a) gunicorn, no recycling",
    "b": f"(b) gunicorn --max-requests {LIMIT} --max-requests-jitter {JITTER}",
    "c0": "(c0) under recycler, counting, no recycling",
    "c": f"(c) under recycler, max_requests {LIMIT} + jitter {JITTER}, scope: process",
    "d": "(d) (c) + whole-server recycle every 5 s, listen:, mode: restart",
    "e": "(e) (c) + whole-server recycle every 5 s, listen:, mode: surge",
}

# recycler's decision for one process: "web[0] recycle pid 123: 212 requests >= limit 207 (...)"
RECYCLE_PID = re.compile(r"recycle pid (\d+): (\d+) requests >= limit (\d+)")
# Any recycle recycler carried out, of a process or of the whole server (not
# "... waits its turn", which is logged before the same decision is carried out).
RECYCLE_ANY = re.compile(r"\] recycl(e|ing)\b")
AUTORESTART = re.compile(r"\[(\d+)\] \[INFO\] Autorestarting worker")
ACCESS_PID = re.compile(r"^<(\d+)>")
UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * UNIT[m.group(2)] if m else None


def parse_wrk(text):
    out = {"rps": None, "p50": None, "p99": None, "non2xx": 0, "connect": 0, "read": 0,
           "write": 0, "timeout": 0, "requests": None}
    if m := re.search(r"Requests/sec:\s+([\d.]+)", text):
        out["rps"] = float(m.group(1))
    if m := re.search(r"^\s+50%\s+(\S+)", text, re.M):
        out["p50"] = ms(m.group(1))
    if m := re.search(r"^\s+99%\s+(\S+)", text, re.M):
        out["p99"] = ms(m.group(1))
    if m := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text):
        out["non2xx"] = int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        for k, v in zip(("connect", "read", "write", "timeout"), m.groups()):
            out[k] = int(v)
    if m := re.search(r"(\d+) requests in", text):
        out["requests"] = int(m.group(1))
    return out


def counters(text):
    return {k: int(v) for k, v in re.findall(r"^(\w+) (\d+)$", text, re.M)}


def analyse(run_dir):
    r = parse_wrk(read(os.path.join(run_dir, "wrk.txt")))
    before = counters(read(os.path.join(run_dir, "cpu-before")))
    after = counters(read(os.path.join(run_dir, "cpu-after")))
    r["cpu_ms"] = (after["cpu_ms"] - before["cpu_ms"]
                   if "cpu_ms" in before and "cpu_ms" in after else None)
    r["switches"] = (after["switches"] - before["switches"]
                     if "switches" in before and "switches" in after else None)
    served = {}
    for line in read(os.path.join(run_dir, "access.log")).splitlines():
        if m := ACCESS_PID.match(line):
            served[int(m.group(1))] = served.get(int(m.group(1)), 0) + 1
    limits = {}  # recycled pid -> drawn limit (None: not logged)
    recycles = 0
    log = read(os.path.join(run_dir, "recycler.log"))
    if log:
        for line in log.splitlines():
            if "waits its turn" in line:
                continue
            if m := RECYCLE_PID.search(line):
                limits[int(m.group(1))] = int(m.group(3))
                recycles += 1
            elif RECYCLE_ANY.search(line):
                recycles += 1
    else:
        for m in AUTORESTART.finditer(read(os.path.join(run_dir, "error.log"))):
            limits[int(m.group(1))] = None
            recycles += 1
    counts = sorted(served.get(pid, 0) for pid in limits)
    r["recycles"] = recycles
    r["per_pid"] = (counts[0], statistics.median(counts), counts[-1]) if counts else None
    with_limit = [(pid, lim) for pid, lim in limits.items() if lim is not None]
    r["over"] = (sum(served.get(pid, 0) > lim + 5 for pid, lim in with_limit)
                 if with_limit else None)
    r["errors"] = r["connect"] + r["read"] + r["write"] + r["timeout"]
    return r


def fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def line(label, r, base):
    ratio = (f"{r['rps'] / base['rps'] * 100:.0f} %" if base and r["rps"] and base["rps"]
             else "—")
    p99x = (f"{r['p99'] / base['p99']:.1f}×" if base and r["p99"] and base["p99"] else "—")
    per_pid = ("—" if r["per_pid"] is None
               else "{} / {:g} / {}".format(*r["per_pid"]))
    errors = "{} ({}/{}/{}/{})".format(r["errors"], r["connect"], r["read"], r["write"],
                                       r["timeout"])
    cpu = "—" if r["cpu_ms"] is None else f"{r['cpu_ms']:,.0f}"
    if r["cpu_ms"] is not None and r["recycles"]:
        cpu += f" ({r['cpu_ms'] / r['recycles']:.2f} ms, "
        cpu += ("—" if r["switches"] is None else f"{r['switches'] / r['recycles']:.0f}")
        cpu += " switches)"
    return (f"| {label} | {fmt(r['rps'])} | {ratio} | {fmt(r['p50'], '{:.2f}')} | "
            f"{fmt(r['p99'], '{:.2f}')} | {p99x} | {r['non2xx']} | {errors} | "
            f"{r['recycles']} | {per_pid} | {fmt(r['over'], '{}')} | {cpu} |")


def median_of(runs):
    def med(key):
        vals = [r[key] for r in runs if r[key] is not None]
        return statistics.median(vals) if vals else None
    m = {k: med(k) for k in ("rps", "p50", "p99", "non2xx", "connect", "read", "write",
                             "timeout", "errors", "recycles", "over", "cpu_ms", "switches")}
    for k in ("non2xx", "connect", "read", "write", "timeout", "errors", "recycles"):
        m[k] = int(m[k]) if m[k] is not None else 0
    if m["over"] is not None:
        m["over"] = int(m["over"])
    pids = [r["per_pid"] for r in runs if r["per_pid"]]
    m["per_pid"] = (min(p[0] for p in pids), statistics.median(p[1] for p in pids),
                    max(p[2] for p in pids)) if pids else None
    return m


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, rows = argv[1], argv[2:]
    results = {}
    for row in rows:
        runs = sorted((d for d in os.listdir(root) if re.fullmatch(re.escape(row) + r"-\d+", d)),
                      key=lambda d: int(d.rsplit("-", 1)[1]))
        results[row] = [analyse(os.path.join(root, d)) for d in runs]
    base = median_of(results["a"]) if results.get("a") else None
    print("| row | req/s | vs (a) | p50 ms | p99 ms | p99 vs (a) | non-2xx | socket errors "
          "(connect/read/write/timeout) | recycles | requests per recycled pid (min / median / "
          "max) | pids over limit + 5 | recycler CPU ms over the load (per recycle) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|")
    for row in rows:
        runs = results[row]
        if not runs:
            continue
        for i, r in enumerate(runs, 1):
            print(line(f"{row} run {i}", r, base))
        print(line(f"**{LABELS.get(row, row)}: median**", median_of(runs), base))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
