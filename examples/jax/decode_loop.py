#!/usr/bin/env python3
"""A JAX-style decode loop whose device memory grows every iteration (seed 001).

In seed 001 a CogVideoX VAE decode on a TPU v6e (32 GB of HBM) worked once and
ran out of device memory the second time: the JIT compile cache kept 3.7 GB
per compiled shape. No vendor API reports TPU memory to a supervisor, so the
program reports it itself, as JAX's `device.memory_stats()["bytes_in_use"]`
would give it, with one line per iteration:

    recycler_notify.device_bytes(stats["bytes_in_use"])   # RECYCLER_DEVICE_BYTES=N

recycler turns that into the `device` metric, and a `leak` policy on it
checkpoints and restarts the loop before the device is full. This example
needs no accelerator: it simulates the figures (weights, a transient
activation peak per iteration, and a compile cache that is never cleared
unless --clear-caches, the seed's fix: `jax.clear_caches()`).

SIGUSR1 saves the iteration reached (checkpoint) and reports
RECYCLER_CHECKPOINTED=1; RECYCLER_RESUME=1 resumes from it.

    recycler run -c examples/jax/decode.yaml
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import recycler_notify  # noqa: E402

GiB = 1 << 30


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=40, help="decode iterations (default 40)")
    p.add_argument("--iteration-time", type=float, default=2.0,
                   help="seconds per iteration (default 2)")
    p.add_argument("--weights-gib", type=float, default=9.0,
                   help="device memory of the model weights (default 9)")
    p.add_argument("--activations-gib", type=float, default=6.0,
                   help="transient device memory during a decode (default 6)")
    p.add_argument("--cache-gib", type=float, default=1.2,
                   help="compile cache kept per iteration (default 1.2)")
    p.add_argument("--clear-caches", action="store_true",
                   help="the fix: clear the compile cache after every iteration")
    p.add_argument("--checkpoint", default="decode.ckpt.json",
                   help="checkpoint file (default decode.ckpt.json)")
    return p.parse_args(argv)


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
            print("resumed at iteration %d" % start, flush=True)
        except (OSError, ValueError, KeyError) as e:
            print("no usable checkpoint (%s): starting at 0" % e, flush=True)
    cache = 0.0
    recycler_notify.device_bytes(a.weights_gib * GiB)
    recycler_notify.ready()
    for i in range(start, a.iterations):
        # the decode: activations on top of weights and the cache, for a while
        recycler_notify.device_bytes((a.weights_gib + cache + a.activations_gib) * GiB)
        time.sleep(a.iteration_time)
        cache = 0.0 if a.clear_caches else cache + a.cache_gib
        in_use = (a.weights_gib + cache) * GiB
        recycler_notify.device_bytes(in_use)
        print("iteration %d/%d: %.1f GiB in use on the device" % (i + 1, a.iterations, in_use / GiB),
              flush=True)
        if asked:
            asked.clear()
            tmp = a.checkpoint + ".tmp"
            os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
            with open(tmp, "w") as f:
                json.dump({"iteration": i + 1}, f)
            os.replace(tmp, a.checkpoint)
            print("checkpoint saved at iteration %d" % (i + 1), flush=True)
            recycler_notify.checkpointed()
    print("decode loop done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
