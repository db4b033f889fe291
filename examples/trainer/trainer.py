#!/usr/bin/env python3
"""A training loop with the memory shape of a real leaking trainer (standard library only).

Every epoch runs --steps training steps, then a validation pass. Each training
step keeps a little memory it should have let go (the loss dict holding on to
tensors in seed 004, the accumulated token lists in seed 000): --leak-mib per
epoch, never freed. The validation pass allocates --validation-mib and frees
it again at the end of the epoch: the healthy per-epoch sawtooth (32 -> 38 ->
32 GB in seed 004) that a leak detector must not mistake for the leak.

It cooperates with recycler's checkpoint-and-restart:

  * SIGUSR1 (recycler's `checkpoint.signal`) asks for a checkpoint: it is saved
    at the next step boundary (epoch, step and training state, written
    atomically), then RECYCLER_CHECKPOINTED=1 goes to $NOTIFY_SOCKET.
  * With RECYCLER_RESUME=1 in its environment (recycler sets it after a
    confirmed checkpoint) it resumes from the checkpoint instead of step 0.
  * --checkpoint-every N also saves every N steps, as trainers do anyway.
  * SIGTERM stops it at once (exit 0); the steps since the last checkpoint are
    redone by the next run.

Run it under recycler with examples/trainer/train.yaml, or alone:

    PYTHONPATH=../../python python3 trainer.py --epochs 3 --leak-mib 16
"""

import argparse
import json
import os
import signal
import sys
import time

import recycler_notify  # python/ in recycler's checkout (train.yaml's PYTHONPATH), or installed
from recycler_notify import trainer

MiB = 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=20, help="epochs to train (default 20)")
    p.add_argument("--steps", type=int, default=10, help="training steps per epoch (default 10)")
    p.add_argument("--step-time", type=float, default=0.5,
                   help="seconds of 'compute' per step (default 0.5)")
    p.add_argument("--model-mib", type=int, default=32,
                   help="memory held for the whole run: the model and optimizer (default 32)")
    p.add_argument("--leak-mib", type=float, default=24,
                   help="memory kept and never freed, per epoch (default 24)")
    p.add_argument("--validation-mib", type=float, default=48,
                   help="memory the validation pass holds until the end of the epoch (default 48)")
    p.add_argument("--validation-steps", type=int, default=3,
                   help="steps of validation per epoch (default 3)")
    p.add_argument("--checkpoint", default="trainer.ckpt.json",
                   help="checkpoint file (default trainer.ckpt.json)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="also checkpoint every N training steps (default 0: only when asked)")
    p.add_argument("--progress", help="append 'GENERATION STEP' per finished step to this file")
    return p.parse_args(argv)


def touched(n_bytes):
    """n_bytes of memory that really is resident (bytes * n writes every page)."""
    return b"\xa5" * max(0, int(n_bytes))


class Trainer:
    def __init__(self, args):
        self.args = args
        self.generation = os.environ.get("RECYCLER_GENERATION", "0")
        self.global_step = 0      # training steps done, over all runs
        self.loss = 10.0          # the "training state" a checkpoint must carry
        self.model = None
        self.kept = []            # the leak: what each step should have freed
        self.validation = []      # the sawtooth: freed at the end of each epoch
        self.checkpoint = None    # the handler of recycler's checkpoint signal
        self.last_saved = None
        self.progress = open(args.progress, "a", buffering=1) if args.progress else None

    # -- checkpoints ----------------------------------------------------------

    def save(self, why):
        state = {"global_step": self.global_step, "loss": self.loss,
                 "generation": self.generation, "saved_at": time.time()}
        tmp = self.args.checkpoint + ".tmp"
        os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.args.checkpoint)  # a crash mid-save leaves the old one whole
        self.last_saved = self.global_step
        epoch, step = divmod(self.global_step, self.args.steps)
        print("checkpoint saved (%s): epoch %d, step %d, global step %d"
              % (why, epoch + 1, step, self.global_step), flush=True)

    def resume(self):
        if not trainer.resuming():
            print("starting from scratch (no RECYCLER_RESUME=1)", flush=True)
            return
        try:
            with open(self.args.checkpoint) as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            print("RECYCLER_RESUME=1 but no usable checkpoint (%s): starting from scratch" % e,
                  flush=True)
            return
        self.global_step = int(state["global_step"])
        self.loss = float(state["loss"])
        self.last_saved = self.global_step
        epoch, step = divmod(self.global_step, self.args.steps)
        print("resumed from checkpoint: epoch %d, step %d, global step %d (recycled for: %s)"
              % (epoch + 1, step, self.global_step, trainer.recycle_reason() or "?"), flush=True)

    # -- training -------------------------------------------------------------

    def step_boundary(self):
        # Saves and sends RECYCLER_CHECKPOINTED=1 if recycler asked since the last boundary.
        if self.checkpoint.at_boundary():
            return
        if (self.args.checkpoint_every and self.global_step % self.args.checkpoint_every == 0
            and self.last_saved != self.global_step):
            self.save("every %d steps" % self.args.checkpoint_every)

    def train_step(self):
        time.sleep(self.args.step_time)
        self.kept.append(touched(self.args.leak_mib * MiB / self.args.steps))
        self.loss *= 0.98
        self.global_step += 1
        if self.progress:
            self.progress.write("%s %d\n" % (self.generation, self.global_step))

    def validate(self):
        per_step = self.args.validation_mib * MiB / max(1, self.args.validation_steps)
        for _ in range(self.args.validation_steps):
            time.sleep(self.args.step_time)
            self.validation.append(touched(per_step))
            self.step_boundary()  # a checkpoint asked for now must not wait for the epoch

    def run(self):
        a = self.args
        # SIGUSR1 (train.yaml's checkpoint.signal) asks for a checkpoint: saved at
        # the next step boundary, where the training state is whole.
        self.checkpoint = trainer.install_checkpoint_handler(
            lambda: self.save("asked by recycler"), signal.SIGUSR1, defer=True)
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        self.model = touched(a.model_mib * MiB)
        self.resume()
        recycler_notify.ready()
        total = a.epochs * a.steps
        while self.global_step < total:
            epoch = self.global_step // a.steps
            while self.global_step < (epoch + 1) * a.steps:
                self.train_step()
                self.step_boundary()
            self.validate()
            self.validation.clear()
            print("epoch %d/%d done: loss %.4f, kept %d MiB" % (
                epoch + 1, a.epochs, self.loss, sum(map(len, self.kept)) // MiB), flush=True)
            recycler_notify.status("epoch %d/%d" % (epoch + 1, a.epochs))
        print("training done: epoch %d/%d, global step %d" % (a.epochs, a.epochs, total),
              flush=True)
        recycler_notify.stopping()
        return 0


if __name__ == "__main__":
    sys.exit(Trainer(parse_args(sys.argv[1:])).run())
