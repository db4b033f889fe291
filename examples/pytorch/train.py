#!/usr/bin/python3
"""Seed 004's leak in a real PyTorch trainer (Debian's python3-torch, CPU).

A small classifier trains on a fixed synthetic dataset. Its validation pass
does what seed 004's did: it appends each batch's loss *tensor*, autograd
graph and all (validation runs without torch.no_grad()), to a list that
outlives the epoch, so host memory climbs epoch over epoch on top of the
healthy per-epoch sawtooth (the epoch's predictions and what evaluation keeps
of each batch, --sawtooth-mib, freed at its end).
--fixed applies the seed's fix: float(loss), and nothing of the graph stays.

It cooperates with recycler (examples/pytorch/README.md):

  * the checkpoint signal (SIGUSR1, train.yaml's checkpoint.signal) asks for a
    checkpoint: torch.save of the model, the optimizer and the position,
    written atomically at the next step boundary, then RECYCLER_CHECKPOINTED=1;
  * on start it resumes from the checkpoint file when there is one (as
    trainers do with their "last" checkpoint), whether recycler says
    RECYCLER_RESUME=1 (it restarted this trainer after a confirmed
    checkpoint) or the checkpoint is from an earlier run;
  * --checkpoint-every N also saves every N steps, as trainers do anyway;
  * each training step is announced (RECYCLER_ITERATION), so the program's
    `watchdog:` sees a wedged loop; --hang-at-step makes one, in its first run;
  * SIGTERM stops it at once (exit 0).

    PYTHONPATH=../../python /usr/bin/python3 train.py --epochs 3
"""

import argparse
import os
import signal
import sys
import threading
import time

import torch
from torch import nn

import recycler_notify  # python/ in recycler's checkout (train.yaml's PYTHONPATH), or installed
from recycler_notify import trainer

MiB = 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=20, help="epochs to train (default 20)")
    p.add_argument("--steps", type=int, default=20, help="training batches per epoch (default 20)")
    p.add_argument("--val-batches", type=int, default=20,
                   help="validation batches per epoch (default 20)")
    p.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    p.add_argument("--hidden", type=int, default=1024, help="hidden width (default 1024)")
    p.add_argument("--sawtooth-mib", type=float, default=48,
                   help="what validation keeps until the epoch ends (default 48): the "
                        "healthy sawtooth")
    p.add_argument("--fixed", action="store_true",
                   help="the seed's fix: keep float(loss), not the loss tensor and its graph")
    p.add_argument("--checkpoint", default="train.ckpt.pt",
                   help="the checkpoint file (default train.ckpt.pt)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="also save every N training steps (default 0: only when asked)")
    p.add_argument("--progress", help="append 'GENERATION STEP' per finished step to this file")
    p.add_argument("--hang-at-step", type=int, default=0,
                   help="in its first run (RECYCLER_GENERATION=1), block forever in a lock "
                        "before this step, as a wedged data loader does (default 0: never)")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="extra seconds per step, to slow a demo down (default 0)")
    return p.parse_args(argv)


class Trainer:
    def __init__(self, args):
        self.args = args
        self.generation = os.environ.get("RECYCLER_GENERATION", "0")
        torch.manual_seed(0)
        torch.set_num_threads(1)
        features = 256
        self.model = nn.Sequential(nn.Linear(features, args.hidden), nn.ReLU(),
                                   nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                                   nn.Linear(args.hidden, 10))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        n_train, n_val = args.steps * args.batch, args.val_batches * args.batch
        data = torch.randn(n_train + n_val, features)
        labels = (data[:, :10].argmax(dim=1) + (data[:, 10] > 0).long()) % 10
        self.train_x, self.train_y = data[:n_train], labels[:n_train]
        self.val_x, self.val_y = data[n_train:], labels[n_train:]
        self.global_step = 0
        self.val_losses = []   # seed 004: outlives the epoch; with tensors, their graphs too
        self.last_saved = None
        self.checkpoint = None
        self.progress = open(args.progress, "a", buffering=1) if args.progress else None
        self.loader_lock = threading.Lock()
        self.loader_lock.acquire()

    # -- checkpoints ----------------------------------------------------------

    def save(self, why):
        started = time.monotonic()
        tmp = self.args.checkpoint + ".tmp"
        os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
        torch.save({"global_step": self.global_step, "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "val_losses": [float(v) for v in self.val_losses]}, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.args.checkpoint)  # a crash mid-save leaves the old one whole
        self.last_saved = self.global_step
        print("checkpoint saved (%s): global step %d, epoch %d, in %.0f ms"
              % (why, self.global_step, self.global_step // self.args.steps + 1,
                 (time.monotonic() - started) * 1000), flush=True)

    def resume(self):
        path = self.args.checkpoint
        if not os.path.exists(path):
            print("starting from scratch (no checkpoint at %s)" % path, flush=True)
            return
        started = time.monotonic()
        state = torch.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.global_step = int(state["global_step"])
        self.val_losses = list(state["val_losses"])
        self.last_saved = self.global_step
        print("resumed from checkpoint: global step %d, epoch %d, loaded in %.0f ms (%s)"
              % (self.global_step, self.global_step // self.args.steps + 1,
                 (time.monotonic() - started) * 1000,
                 "recycled for: " + (trainer.recycle_reason() or "?") if trainer.resuming()
                 else "a checkpoint of an earlier run"), flush=True)

    # -- training -------------------------------------------------------------

    def step_boundary(self):
        # Saves and sends RECYCLER_CHECKPOINTED=1 if recycler asked since the last boundary.
        if self.checkpoint.at_boundary():
            return
        every = self.args.checkpoint_every
        if every and self.global_step % every == 0 and self.last_saved != self.global_step:
            self.save("every %d steps" % every)

    def next_batch(self, b):
        # A data loader's hand-off: with --hang-at-step, the first run waits on
        # a lock nobody will release, as a loader whose worker died does.
        if self.args.hang_at_step and self.global_step + 1 == self.args.hang_at_step \
                and self.generation == "1":
            print("waiting for batch %d (it will never come)" % (self.global_step + 1), flush=True)
            self.loader_lock.acquire()
        return (self.train_x[b * self.args.batch:(b + 1) * self.args.batch],
                self.train_y[b * self.args.batch:(b + 1) * self.args.batch])

    def train_step(self):
        # Alive (the program's watchdog: timeout), and where the loop is.
        recycler_notify.iteration(self.global_step + 1)
        b = self.global_step % self.args.steps
        x, y = self.next_batch(b)
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        if self.args.step_time:
            time.sleep(self.args.step_time)
        self.global_step += 1
        if self.progress:
            self.progress.write("%s %d\n" % (self.generation, self.global_step))

    def validate(self):
        predictions = []  # the sawtooth: the epoch's outputs, freed when it ends
        features = []     # ... and what an evaluation keeps of each batch besides
        per_batch = int(self.args.sawtooth_mib * MiB / 4 / max(1, self.args.val_batches))
        for b in range(self.args.val_batches):
            x = self.val_x[b * self.args.batch:(b + 1) * self.args.batch]
            y = self.val_y[b * self.args.batch:(b + 1) * self.args.batch]
            out = self.model(x)  # seed 004: no torch.no_grad(), so the graph is built
            loss = self.loss_fn(out, y)
            predictions.append(out.detach().clone())
            features.append(torch.ones(per_batch))
            # The bug and its fix: a tensor keeps its graph (every activation of
            # the batch) alive for as long as the list lives.
            self.val_losses.append(float(loss) if self.args.fixed else loss)
            self.step_boundary()
        accuracy = sum(int((p.argmax(1) == self.val_y[i * self.args.batch:(i + 1) * self.args.batch])
                           .sum()) for i, p in enumerate(predictions)) / len(self.val_y)
        return float(self.val_losses[-1]), accuracy

    def run(self):
        a = self.args
        self.checkpoint = trainer.install_checkpoint_handler(
            lambda: self.save("asked by recycler"), signal.SIGUSR1, defer=True)
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        self.resume()
        recycler_notify.ready()
        total = a.epochs * a.steps
        while self.global_step < total:
            epoch = self.global_step // a.steps
            while self.global_step < (epoch + 1) * a.steps:
                self.train_step()
                self.step_boundary()
            loss, accuracy = self.validate()
            print("epoch %d/%d done: val loss %.4f, accuracy %.3f, %d validation losses kept"
                  % (epoch + 1, a.epochs, loss, accuracy, len(self.val_losses)), flush=True)
            recycler_notify.status("epoch %d/%d" % (epoch + 1, a.epochs))
        print("training done: epoch %d/%d, global step %d" % (a.epochs, a.epochs, total),
              flush=True)
        recycler_notify.stopping()
        return 0


if __name__ == "__main__":
    sys.exit(Trainer(parse_args(sys.argv[1:])).run())
