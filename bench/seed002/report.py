#!/usr/bin/python3
"""The table of bench/seed002_container.sh, from what each way left in WORK:

  WAY.wrk      wrk's output, with mix.lua's "seed002 KEY VALUE" lines
  WAY.cgroup   "oom_kill max_usage_in_bytes" of the container's memory cgroup, every 0.5 s
  WAY.state    podman inspect: restarts, status, oomkilled
  WAY.log      podman logs -t (a: recycler's log with gunicorn's output in it;
               b: gunicorn's own)
  a.metrics    recycler's /metrics at the end of the load

  report.py WORK [--duration S] [--version V] [--delay-ms MS] [--jitter-ms MS] [--spike-every N]
            [--seed N]

Ways: a (recycler as the entrypoint), b (gunicorn alone, --max-requests).
Standard library only.
"""

import argparse
import datetime
import os
import re
import sys

WAYS = (("a", "A: recycler"), ("b", "B: gunicorn --max-requests"))

ACCESS = re.compile(r'<(\d+)> "GET (/\S*) HTTP/[\d.]+" (\d+) \S+ (\d+)ms')
RECYCLE = re.compile(r"recycle pid (\d+): (.*) \((\S+) policy(?:;[^)]*)?\)\s*$")
THRESHOLD = re.compile(r"> ([\d.]+ ?[KMGT]?i?B)( for \S+)?")
SIGKILLED = re.compile(r"Worker with pid (\d+) was terminated due to signal 9"
                       r"|Worker \(pid:(\d+)\) was sent SIGKILL")
OTHER_SIGNAL = re.compile(r"Worker with pid (\d+) was terminated due to signal (\d+)"
                          r"|Worker \(pid:(\d+)\) was sent (SIG\w+)")


def stamp(line):
    """podman logs -t: an RFC 3339 time with nanoseconds, then the line."""
    head, _, rest = line.partition(" ")
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", head)
    if not m:
        return None, line
    t = datetime.datetime.fromisoformat(m[1]).replace(tzinfo=datetime.timezone.utc)
    frac = float("0." + m[2]) if m[2] else 0.0
    return t.timestamp() + frac, rest


def read_kv(path, prefix=""):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        if prefix and not line.startswith(prefix):
            continue
        parts = line[len(prefix):].split()
        if len(parts) >= 2:
            out[parts[0]] = parts[1]
    return out


def cgroup(path):
    """OOM kills summed over the cgroup's lives (a restart starts it at 0), and the peak."""
    total = prev = peak = 0
    samples = 0
    if os.path.exists(path):
        for line in open(path):
            try:
                oom, usage = (int(x) for x in line.split())
            except ValueError:
                continue
            samples += 1
            if oom < prev:
                total += prev
            prev = oom
            peak = max(peak, usage)
    return total + prev, peak, samples


def metrics(path):
    """Prometheus text: {(name, frozenset(labels)): value}."""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m[2] or ""))
        try:
            out[(m[1], labels)] = float(m[3])
        except ValueError:
            pass
    return out


def metric_sum(ms, name, **want):
    return sum(v for (n, labels), v in ms.items()
               if n == name and all((k, w) in labels for k, w in want.items()))


def way_figures(work, way):
    f = {}
    wrk = {k: int(v) for k, v in read_kv(os.path.join(work, way + ".wrk"), "seed002 ").items()}
    f["wrk"] = wrk
    errs = {k: wrk.get("err_" + k, 0) for k in ("connect", "read", "write", "timeout")}
    f["errors"] = errs
    # /gradcam in flight, seen by wrk: [sent, answered or found failed] (s).
    spikes = []
    path = os.path.join(work, way + ".wrk")
    for line in open(path, errors="replace") if os.path.exists(path) else ():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "seed002_gradcam":
            start, end = int(parts[1]) / 1000.0, int(parts[2]) / 1000.0
            if parts[3] == "open":
                end = float("inf")
            elif parts[3] == "failed":
                end += 1.0  # the kill that failed it is logged a little after wrk saw it
            spikes.append((start, end, parts[3]))
    f["spikes"] = spikes
    f["failed"] = sum(errs.values()) + wrk.get("non2xx", 0)
    f["oom"], f["peak"], f["samples"] = cgroup(os.path.join(work, way + ".cgroup"))
    f["state"] = read_kv(os.path.join(work, way + ".state"))

    access = []  # (end time, pid, path, status, ms)
    recycles = []  # (time, pid, reason, policy)
    sigkilled, other_signals, autorestarts, timeouts, boots = [], [], 0, 0, 0
    for line in open(os.path.join(work, way + ".log"), errors="replace"):
        t, text = stamp(line.rstrip("\n"))
        m = ACCESS.search(text)
        if m:
            access.append((t, int(m[1]), m[2], int(m[3]), int(m[4])))
            continue
        m = RECYCLE.search(text)
        if m:
            recycles.append((t, int(m[1]), m[2], m[3]))
            continue
        m = SIGKILLED.search(text)
        if m:
            sigkilled.append((t, int(m[1] or m[2])))
            continue
        m = OTHER_SIGNAL.search(text)
        if m:
            other_signals.append(text.strip())
            continue
        if "Autorestarting worker after current request" in text:
            autorestarts += 1
        elif "WORKER TIMEOUT" in text:
            timeouts += 1
        elif "Booting worker with pid" in text:
            boots += 1
    f["access"] = access
    f["workers"] = len({pid for _, pid, _, _, _ in access})
    f["boots"] = boots
    f["autorestarts"] = autorestarts
    f["sigkilled"] = sigkilled
    f["other_signals"] = other_signals
    f["timeouts"] = timeouts
    f["gradcam_done"] = sum(1 for _, _, path, _, _ in access if path.startswith("/gradcam"))

    # Where a /gradcam held its 150 MiB: an answered one from its access line
    # (that worker, from the request's start to its answer); one that failed
    # or was still open at the end from wrk's times (its worker unknown). wrk's
    # own times of an answered one would also cover its wait in the listen
    # backlog while no worker was there.
    held = [(t - ms / 1000.0, t, pid) for t, pid, path, _, ms in access
            if path.startswith("/gradcam") and t is not None]
    unanswered = [(s, e) for s, e, how in spikes if how != "ok"]

    def in_spike(t, pid):
        return t is not None and (any(s <= t <= e and p == pid for s, e, p in held) or
                                  any(s <= t <= e for s, e in unanswered))

    # Recycles by cause: the policy, and a memory policy's threshold.
    by_cause = {}
    during_spike = []
    for t, pid, reason, policy in recycles:
        cause = policy
        if policy == "memory":
            m = THRESHOLD.search(reason)
            if m:
                cause = "memory %s %s" % (m[1], "held" if m[2] else "at once")
        by_cause[cause] = by_cause.get(cause, 0) + 1
        if in_spike(t, pid):
            during_spike.append((cause, reason))
    f["recycles"] = recycles
    # Requests that began on a worker after recycler's signal to it: gthread
    # keeps accepting until its select(1.0) returns, and serves what it holds.
    signalled = {}
    for t, pid, _, _ in recycles:
        if t is not None:
            signalled.setdefault(pid, t)
    late = [(path, t) for t, pid, path, _, ms in access
            if pid in signalled and t is not None and t - ms / 1000.0 > signalled[pid]]
    f["late"] = len(late)
    f["late_gradcam"] = sum(1 for path, _ in late if path.startswith("/gradcam"))
    # ... and the /gradcam that failed because the signalled worker was killed
    # (no access line): sent after the signal, failed as the worker was killed.
    for k, pid in sigkilled:
        if pid in signalled and any(how == "failed" and signalled[pid] < start <= k <= end
                                    for start, end, how in spikes):
            f["late"] += 1
            f["late_gradcam"] += 1
    f["kills_in_spike"] = sum(1 for t, pid in sigkilled if in_spike(t, pid))
    # A worker recycled (SIGTERM: it finishes what it holds) that the kernel
    # killed before it left: what it held outgrew the container meanwhile.
    killed = {pid for _, pid in sigkilled}
    f["recycled_then_killed"] = len({pid for _, pid, _, _ in recycles if pid in killed})
    f["by_cause"] = by_cause
    f["during_spike"] = during_spike
    # A /gradcam cut short by a kill leaves no access line: "/gradcam answered
    # / sent" in the table shows those.

    ms = metrics(os.path.join(work, way + ".metrics"))
    f["metrics"] = ms
    if ms:
        f["m_recycles"] = {}
        for (n, labels), v in ms.items():
            if n == "recycler_recycles_total":
                d = dict(labels)
                key = "%s/%s" % (d.get("policy", "?"), d.get("action", "?"))
                f["m_recycles"][key] = f["m_recycles"].get(key, 0) + int(v)
        f["m_oom"] = int(metric_sum(ms, "recycler_oom_kills_total"))
        f["m_container_oom"] = int(metric_sum(ms, "recycler_container_oom_kills_total"))
    return f


def ms_(us):
    if us is None:
        return "-"
    if us >= 1_000_000:
        return "%.2f s" % (us / 1e6)
    return "%.1f ms" % (us / 1e3) if us < 100_000 else "%.0f ms" % (us / 1e3)


def ratio(b, a):
    if a == 0:
        return "∞ (%s / 0)" % b if b else "- (0 / 0)"
    return "%.2f" % (b / a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--duration", default="?")
    ap.add_argument("--version", default="?")
    ap.add_argument("--delay-ms", default="1000")
    ap.add_argument("--jitter-ms", default="250")
    ap.add_argument("--spike-every", default="20")
    ap.add_argument("--seed", default="2002")
    args = ap.parse_args()
    figs = {way: way_figures(args.work, way) for way, _ in WAYS}
    a, b = figs["a"], figs["b"]

    def row(label, fa, fb, r=""):
        print("| %s | %s | %s | %s |" % (label, fa, fb, r))

    def causes(f):
        counts = dict(f["by_cause"])
        counts.setdefault("max_requests", 0)
        parts = ["%s %d" % (k, v) for k, v in sorted(counts.items())]
        return "%d (%s)" % (sum(counts.values()), ", ".join(parts))

    def gunicorn_recycles(f):
        parts = ["max-requests %d" % f["autorestarts"], "SIGKILL %d" % len(f["sigkilled"])]
        if f["timeouts"]:
            parts.append("timeout %d" % f["timeouts"])
        if f["other_signals"]:
            parts.append("other signals %d" % len(f["other_signals"]))
        n = f["autorestarts"] + len(f["sigkilled"]) + f["timeouts"] + len(f["other_signals"])
        return "%d (%s)" % (n, ", ".join(parts))

    def failed(f):
        e = f["errors"]
        return "%d (connect %d, read %d, write %d, timeout %d, non-2xx %d)" % (
            f["failed"], e["connect"], e["read"], e["write"], e["timeout"],
            f["wrk"].get("non2xx", 0))

    print()
    print("seed 002 in a container (image %s), %s s of load a way, wrk -t2 -c2, "
          "a request every %s±%s ms a connection, 1 in %s to /gradcam, seed %s"
          % (args.version, args.duration, args.delay_ms, args.jitter_ms, args.spike_every,
             args.seed))
    print()
    print("| | %s | %s | B/A |" % (WAYS[0][1], WAYS[1][1]))
    print("|---|---:|---:|---:|")
    row("requests completed", a["wrk"].get("requests", 0), b["wrk"].get("requests", 0))
    row("/gradcam answered / sent", "%d / %d" % (a["gradcam_done"], a["wrk"].get("sent_gradcam", 0)),
        "%d / %d" % (b["gradcam_done"], b["wrk"].get("sent_gradcam", 0)))
    row("failed requests", failed(a), failed(b), ratio(b["failed"], a["failed"]))
    row("p50 latency", ms_(a["wrk"].get("p50_us")), ms_(b["wrk"].get("p50_us")))
    row("p90 latency", ms_(a["wrk"].get("p90_us")), ms_(b["wrk"].get("p90_us")))
    row("p99 latency", ms_(a["wrk"].get("p99_us")), ms_(b["wrk"].get("p99_us")),
        ratio(b["wrk"].get("p99_us", 0), a["wrk"].get("p99_us", 0)))
    row("max latency", ms_(a["wrk"].get("max_us")), ms_(b["wrk"].get("max_us")))
    row("recycles by recycler (log)", causes(a), causes(b) if b["by_cause"] else "-")
    row("worker exits seen by gunicorn's master", gunicorn_recycles(a), gunicorn_recycles(b))
    row("OOM kills (container's memory.oom_control)", a["oom"], b["oom"], ratio(b["oom"], a["oom"]))
    if "m_oom" in a:
        row("OOM kills, recycler's metrics (worker / container)",
            "%d / %d" % (a["m_oom"], a["m_container_oom"]), "-")
    row("peak container memory (max_usage_in_bytes)", "%d MiB" % (a["peak"] >> 20),
        "%d MiB" % (b["peak"] >> 20))
    row("recycles while a /gradcam was in flight",
        "%d%s" % (len(a["during_spike"]),
                  " (%s)" % "; ".join(r for _, r in a["during_spike"]) if a["during_spike"] else ""),
        "-")
    row("workers killed by signal 9 while a /gradcam was in flight",
        "%d of %d" % (a["kills_in_spike"], len(a["sigkilled"])),
        "%d of %d" % (b["kills_in_spike"], len(b["sigkilled"])))
    row("requests begun on a worker after its recycle signal (/gradcam)",
        "%d (%d)" % (a["late"], a["late_gradcam"]), "-")
    row("recycled workers then killed by signal 9 before they left",
        a["recycled_then_killed"], b["recycled_then_killed"] if b["recycles"] else "-")
    row("worker processes that served", a["workers"], b["workers"])
    row("container restarts", a["state"].get("restarts", "?"), b["state"].get("restarts", "?"))
    print()
    if "m_recycles" in a:
        print("A, recycler_recycles_total by policy/action: %s" % (
            ", ".join("%s %d" % kv for kv in sorted(a["m_recycles"].items())) or "none"))
    for way, f in figs.items():
        reasons = {}
        for _, _, reason, policy in f["recycles"]:
            reasons.setdefault(policy, []).append(reason)
        for policy, rs in sorted(reasons.items()):
            print("%s, %s policy recycle reasons: %s" % (way.upper(), policy, "; ".join(rs)))
        if f["other_signals"]:
            print("%s, other worker exits: %s" % (way.upper(), "; ".join(f["other_signals"])))
        if f["wrk"].get("parked_timers"):
            print("%s: mix.lua parked %d duplicate wrk timer(s) (a connection closed while idle)"
                  % (way.upper(), f["wrk"]["parked_timers"]))
        if f["samples"] == 0:
            print("%s: WARNING: no cgroup sample: OOM kills and peak unknown" % way.upper())
    # Figures the script checks: each way must have had load, and recycler's
    # own count of container OOM kills must agree with the cgroup's.
    problems = []
    for way, f in figs.items():
        if not f["wrk"].get("requests"):
            problems.append("%s: wrk completed no request" % way)
    if "m_container_oom" in a and a["m_container_oom"] != a["oom"]:
        problems.append("a: recycler counted %d container OOM kills, the cgroup %d"
                        % (a["m_container_oom"], a["oom"]))
    for p in problems:
        print("WARNING:", p)
    return 1 if any("completed no request" in p for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
