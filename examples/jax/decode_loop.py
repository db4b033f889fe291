#!/usr/bin/env python3
"""A JAX-style decode loop whose device memory grows every iteration (seed 001).

In seed 001 a CogVideoX VAE decode on a TPU v6e (32 GB of HBM) worked once and
ran out of device memory the second time: the JIT compile cache kept 3.7 GB
per compiled shape (8.38 GB before the decode, 25.16 GB at its peak, 12.12 GB
after). No vendor API reports TPU memory to a supervisor, so the program
reports it itself, as JAX's `device.memory_stats()["bytes_in_use"]` would give
it, and marks where each iteration starts:

    recycler_notify.iteration(i, device_bytes=stats["bytes_in_use"])
    # RECYCLER_ITERATION=i and RECYCLER_DEVICE_BYTES=N, in one message

recycler turns that into the `device` metric and iteration boundaries. A
slope over minutes is no use against a few large steps; the `leak` policy
projects the growth per iteration instead: once two steps agree and the next
iteration would peak over the limit, it asks for a checkpoint at the
boundary, before that iteration allocates anything. This example needs no
accelerator: it simulates the seed's figures (weights, a transient activation
peak per decode, and a compile cache that is never cleared unless
--clear-caches, the seed's fix: `jax.clear_caches()`).

SIGUSR1 (the checkpoint request) abandons the decode under way (it is done
again after the restart), saves the iterations finished and reports
RECYCLER_CHECKPOINTED=1; RECYCLER_RESUME=1 resumes from them.

    recycler run -c examples/jax/decode.yaml
"""

import argparse
import json
import os
import signal
import sys
import time

import recycler_notify  # python/ in recycler's checkout (decode.yaml's PYTHONPATH), or installed

GiB = 1 << 30


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=12, help="decode iterations (default 12)")
    p.add_argument("--iteration-time", type=float, default=3.0,
                   help="seconds per iteration (default 3)")
    p.add_argument("--weights-gib", type=float, default=8.4,
                   help="device memory of the model weights (default 8.4)")
    p.add_argument("--activations-gib", type=float, default=13.0,
                   help="transient device memory during a decode (default 13)")
    p.add_argument("--cache-gib", type=float, default=3.7,
                   help="compile cache kept per iteration (default 3.7)")
    p.add_argument("--clear-caches", action="store_true",
                   help="the fix: clear the compile cache after every iteration")
    p.add_argument("--checkpoint", default="decode.ckpt.json",
                   help="checkpoint file (default decode.ckpt.json)")
    return p.parse_args(argv)


def save(path, done):
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
    with open(tmp, "w") as f:
        json.dump({"iteration": done}, f)
    os.replace(tmp, path)


def main(argv):
    a = parse_args(argv)
    asked = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: asked.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    start = 0
    if os.environ.get("RECYCLER_RESUME") == "1":
        try:
            with open(a.checkpoint) as f:
                start = int(json.load(f)["iteration"])
            print("resumed at iteration %d" % (start + 1), flush=True)
        except (OSError, ValueError, KeyError) as e:
            print("no usable checkpoint (%s): starting at 1" % e, flush=True)
    cache = 0.0
    recycler_notify.device_bytes(a.weights_gib * GiB)
    recycler_notify.ready()
    for i in range(start, a.iterations):
        # The boundary, with the level between iterations, before the decode
        # allocates anything: a checkpoint asked for now costs no work.
        recycler_notify.iteration(i + 1, device_bytes=(a.weights_gib + cache) * GiB)
        # The decode: activations on top of weights and the cache, for a
        # while, looking for a checkpoint request every frame.
        recycler_notify.device_bytes((a.weights_gib + cache + a.activations_gib) * GiB)
        deadline = time.monotonic() + a.iteration_time
        while not asked and time.monotonic() < deadline:
            time.sleep(0.05)
        if asked:
            save(a.checkpoint, i)
            print("checkpoint saved after %d iterations; iteration %d is done again after the "
                  "restart" % (i, i + 1), flush=True)
            if recycler_notify.checkpointed():
                while True:
                    signal.pause()  # recycler stops it (SIGTERM) and starts the replacement
            return 0
        cache = 0.0 if a.clear_caches else cache + a.cache_gib
        in_use = (a.weights_gib + cache) * GiB
        recycler_notify.device_bytes(in_use)
        print("iteration %d/%d: %.1f GiB in use on the device" % (i + 1, a.iterations, in_use / GiB),
              flush=True)
    print("decode loop done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
