"""A trainer whose GPU memory grows step after step, for recycler's `metric: gpu`.

With ``--backend torch`` it is a PyTorch/CUDA loop that keeps a tensor per step
(the classic leak: a loss or activations appended to a Python list), which
NVML sees as the process's GPU memory. With ``--backend fake`` (no GPU needed)
it reports the same growth to the fake NVML driver recycler's tests build
(tests/support/fake_nvml): the figure goes to $RECYCLER_FAKE_NVML_DIR/procs/PID,
where a CUDA allocation would have been.

Either way it checkpoints the way recycler asks: SIGUSR1 (``checkpoint.signal``)
saves at the next step boundary, then ``RECYCLER_CHECKPOINTED=1``; started
again with ``RECYCLER_RESUME=1`` it resumes from the saved step. Standard
library only, apart from torch for ``--backend torch``.
"""

import argparse
import json
import os
import signal
import sys
import time

import recycler_notify  # python/ in recycler's checkout (the configs' PYTHONPATH), or installed
from recycler_notify import trainer

MiB = 1 << 20


class TorchGpu:
    def __init__(self):
        import torch  # only this backend needs it
        if not torch.cuda.is_available():
            sys.exit("gpu_trainer: torch sees no CUDA device (try --backend fake)")
        self.torch = torch
        self.kept = []

    def leak(self, n_bytes):
        self.kept.append(self.torch.ones(int(n_bytes), dtype=self.torch.uint8, device="cuda"))


class FakeGpu:
    def __init__(self):
        directory = os.environ.get("RECYCLER_FAKE_NVML_DIR")
        if not directory:
            sys.exit("gpu_trainer: --backend fake needs RECYCLER_FAKE_NVML_DIR")
        self.path = os.path.join(directory, "procs", str(os.getpid()))
        self.held = 0
        signal.signal(signal.SIGTERM, self.free_and_exit)

    def leak(self, n_bytes):
        self.held += int(n_bytes)
        with open(self.path + ".new", "w") as f:
            f.write("0 %d\n" % self.held)
        os.replace(self.path + ".new", self.path)

    def free_and_exit(self, signum, frame):
        # A process's GPU memory goes with it.
        try:
            os.unlink(self.path)
        except OSError:
            pass
        sys.exit(0)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["torch", "fake"], default="torch")
    p.add_argument("--steps", type=int, default=200, help="steps in the whole run")
    p.add_argument("--step-time", type=float, default=0.1, help="seconds per step")
    p.add_argument("--leak-mib", type=float, default=8, help="GPU memory kept per step, MiB")
    p.add_argument("--checkpoint", required=True, help="checkpoint file")
    a = p.parse_args(argv)

    gpu = TorchGpu() if a.backend == "torch" else FakeGpu()
    step = 0

    def save():
        tmp = a.checkpoint + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step}, f)
        os.replace(tmp, a.checkpoint)
        print("checkpoint saved at step %d" % step, flush=True)

    # SIGUSR1: save at the next step boundary, then RECYCLER_CHECKPOINTED=1.
    checkpoint = trainer.install_checkpoint_handler(save, signal.SIGUSR1, defer=True)
    if trainer.resuming():
        try:
            with open(a.checkpoint) as f:
                step = int(json.load(f)["step"])
            print("resumed at step %d (recycled for: %s)"
                  % (step, trainer.recycle_reason() or "?"), flush=True)
        except (OSError, ValueError, KeyError) as e:
            print("no usable checkpoint (%s): starting from scratch" % e, flush=True)
    recycler_notify.ready()
    while step < a.steps:
        time.sleep(a.step_time)  # the forward and backward pass
        gpu.leak(a.leak_mib * MiB)
        step += 1
        checkpoint.at_boundary()
        if step % 20 == 0:
            recycler_notify.status("step %d/%d" % (step, a.steps))
    print("training done: %d steps" % a.steps, flush=True)
    recycler_notify.stopping()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
