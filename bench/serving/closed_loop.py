#!/usr/bin/python3
"""A closed-loop HTTP load to check wrk's latency figures (bench/serving.sh LOAD=closed_loop).

    /usr/bin/python3 bench/serving/closed_loop.py PORT [--connections 16] [--duration 20]

Each of --connections loops on 127.0.0.1:PORT: connect, GET / (HTTP/1.0, as
gunicorn's sync workers close every connection anyway), read the whole
response, note how long that took from the connect, and again, until
--duration has passed. Prints what bench/serving/report.py reads from wrk:
Requests/sec, the 50 % and 99 % latencies, non-2xx responses, socket errors,
and the requests done; and how many requests were in flight on average (the
latencies' sum over the duration, Little's law: at most --connections). The
standard library only; one CPU's worth of Python, so it loads less than wrk.
"""
import argparse
import asyncio
import time


async def loop(port, until, stats):
    while time.monotonic() < until:
        start = time.monotonic()
        writer = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["connect"] += 1
            continue
        try:
            writer.write(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
        except OSError:
            stats["write"] += 1
            writer.close()
            continue
        try:
            response = await reader.read()
        except OSError:
            response = b""
        writer.close()
        if not response:
            stats["read"] += 1
            continue
        stats["latencies"].append(time.monotonic() - start)
        if not response.startswith((b"HTTP/1.0 2", b"HTTP/1.1 2")):
            stats["non2xx"] += 1


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
    stats = {"latencies": [], "connect": 0, "read": 0, "write": 0, "non2xx": 0}
    began = time.monotonic()
    until = began + args.duration

    async def run():
        await asyncio.gather(*(loop(args.port, until, stats) for _ in range(args.connections)))

    asyncio.run(run())
    elapsed = time.monotonic() - began
    latencies = sorted(stats["latencies"])
    n = len(latencies)
    print("closed loop: %d connections, %.1fs" % (args.connections, elapsed))
    print("  Latency Distribution")
    print("     50%%   %.2fms" % (1000 * percentile(latencies, 50)))
    print("     99%%   %.2fms" % (1000 * percentile(latencies, 99)))
    print("  %d requests in %.2fs" % (n, elapsed))
    print("  Socket errors: connect %d, read %d, write %d, timeout 0" %
          (stats["connect"], stats["read"], stats["write"]))
    if stats["non2xx"]:
        print("  Non-2xx or 3xx responses: %d" % stats["non2xx"])
    print("  In flight (Little's law): %.1f" % (sum(latencies) / elapsed))
    print("  Requests >= 100ms: %d" % sum(1 for x in latencies if x >= 0.1))
    print("Requests/sec: %.2f" % (n / elapsed))


if __name__ == "__main__":
    main()
