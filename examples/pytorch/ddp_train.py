#!/usr/bin/python3
"""A torch.distributed job (gloo, CPU) whose ranks recycler restarts together.

Each rank trains the same small model with DistributedDataParallel on its own
shard of a synthetic dataset. The ranks come from the environment as
torch.distributed's env:// reads it: RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, set by recycler for a `gang:` program (ddp.yaml: one slot per
rank) or by torchrun (torchrun.yaml: one slot, torchrun's agent starts the
ranks).

It cooperates with recycler (examples/pytorch/README.md):

  * the checkpoint signal (SIGUSR1) asks for a checkpoint. The ranks agree on
    it at the next step boundary (an all_reduce of the request, since the
    signal reaches each rank at a slightly different step), rank 0 saves the
    model, the optimizer and the step (atomically), every rank waits for the
    save (a barrier) and reports RECYCLER_CHECKPOINTED=1, then waits for its
    stop: no step is taken after the checkpoint, so none is redone;
  * on start it resumes from the checkpoint file when there is one;
  * --leak-rank R --leak-mib M: rank R keeps M MiB more after every step, a
    leak only that rank has (recycler's policy sees it there, and the gang
    recycles every rank with it); --leak-runs N: only in the first N runs;
  * each step is announced (RECYCLER_ITERATION) and appended to --progress
    as "RANK GENERATION STEP UNIXTIME" (GENERATION: recycler's, or torchrun's
    restart count + 1);
  * --crash-rank R --crash-at-step S: rank R exits with status 1 before step S
    of its first run (a peer lost mid-job, as an OOM kill or a fault does);
    --hang-rank R --hang-at-step S: rank R blocks forever there instead, and
    the other ranks wait for it in their next all-reduce (a stuck collective);
  * SIGTERM stops it at once (exit 0).

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        PYTHONPATH=../../python /usr/bin/python3 ddp_train.py --steps 50
"""

import argparse
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import recycler_notify  # python/ in recycler's checkout (PYTHONPATH), or installed
from recycler_notify import trainer

MiB = 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400, help="training steps in all (default 400)")
    p.add_argument("--batch", type=int, default=64, help="batch size per rank (default 64)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width (default 256)")
    p.add_argument("--checkpoint", default="ddp.ckpt.pt",
                   help="the checkpoint file rank 0 writes (default ddp.ckpt.pt)")
    p.add_argument("--progress", help="append 'RANK GENERATION STEP' per finished step")
    p.add_argument("--leak-rank", type=int, default=-1,
                   help="the rank that leaks (default -1: none)")
    p.add_argument("--leak-mib", type=float, default=0.0,
                   help="MiB the leaking rank keeps after each step (default 0)")
    p.add_argument("--leak-runs", type=int, default=0,
                   help="leak only in the first N runs (RECYCLER_GENERATION <= N; default 0: "
                        "in every run)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="rank 0 also saves every N steps (default 0: only when asked)")
    p.add_argument("--crash-rank", type=int, default=-1,
                   help="the rank that crashes (exit 1) at --crash-at-step in its first run")
    p.add_argument("--crash-at-step", type=int, default=0, help="(default 0: never)")
    p.add_argument("--hang-rank", type=int, default=-1,
                   help="the rank that hangs (blocks in a lock, as a wedged data loader does) "
                        "at --hang-at-step in its first run")
    p.add_argument("--hang-at-step", type=int, default=0, help="(default 0: never)")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="extra seconds per step, to slow a demo down (default 0)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait for a peer (default 60)")
    return p.parse_args(argv)


class Rank:
    def __init__(self, args):
        self.args = args
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.generation = os.environ.get("RECYCLER_GENERATION") or str(
            int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1)
        self.first_run = self.generation == "1"
        torch.manual_seed(0)
        torch.set_num_threads(1)
        features = 64
        model = nn.Sequential(nn.Linear(features, args.hidden), nn.ReLU(),
                              nn.Linear(args.hidden, 10))
        self.model = DistributedDataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        data = torch.randn(16 * args.batch * self.world, features)
        labels = data[:, :10].argmax(dim=1)
        shard = slice(self.rank, None, self.world)  # each rank its own samples
        self.x, self.y = data[shard], labels[shard]
        self.step = 0
        self.leaked = []
        runs = args.leak_runs
        self.leaking = (self.rank == args.leak_rank and args.leak_mib > 0
                        and (runs == 0 or int(self.generation or 0) <= runs))
        self.progress = open(args.progress, "a", buffering=1) if args.progress else None
        self.handler = None

    def save(self):
        started = time.monotonic()
        path = self.args.checkpoint
        tmp = path + ".tmp"
        os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
        torch.save({"step": self.step, "model": self.model.module.state_dict(),
                    "optimizer": self.optimizer.state_dict()}, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)  # a crash mid-save leaves the old one whole
        print("rank 0: checkpoint saved at step %d in %.0f ms"
              % (self.step, (time.monotonic() - started) * 1000), flush=True)

    def resume(self):
        path = self.args.checkpoint
        if not os.path.exists(path):
            print("rank %d: starting from scratch" % self.rank, flush=True)
            return
        state = torch.load(path)
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        print("rank %d: resumed from checkpoint at step %d (%s)"
              % (self.rank, self.step,
                 "recycled for: " + (trainer.recycle_reason() or "?") if trainer.resuming()
                 else "a checkpoint of an earlier run"), flush=True)

    def checkpoint_asked(self):
        # Every rank must take the checkpoint at the same step: the request
        # reached each one at its own moment, so they agree on it first.
        flag = torch.tensor([1 if self.handler.asked else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def checkpoint(self):
        self.handler.asked = False
        if self.rank == 0:
            self.save()
        dist.barrier()  # the file is whole before any rank says so
        recycler_notify.checkpointed()
        print("rank %d: checkpointed at step %d; waiting to be stopped" % (self.rank, self.step),
              flush=True)
        while True:  # recycler stops every rank now (SIGTERM)
            time.sleep(0.05)

    def train_step(self):
        if (self.rank == self.args.crash_rank and self.first_run
                and self.step + 1 == self.args.crash_at_step):
            print("rank %d: crashing before step %d" % (self.rank, self.step + 1), flush=True)
            os._exit(1)
        if (self.rank == self.args.hang_rank and self.first_run
                and self.step + 1 == self.args.hang_at_step):
            print("rank %d: waiting for batch %d (it will never come)"
                  % (self.rank, self.step + 1), flush=True)
            stuck = threading.Lock()
            stuck.acquire()
            stuck.acquire()  # nobody releases it: blocks for good (SIGTERM still ends it)
        recycler_notify.iteration(self.step + 1)
        b = self.step % 16
        x = self.x[b * self.args.batch:(b + 1) * self.args.batch]
        y = self.y[b * self.args.batch:(b + 1) * self.args.batch]
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        self.optimizer.step()
        if self.leaking:
            self.leaked.append(torch.ones(int(self.args.leak_mib * MiB / 4)))
        if self.args.step_time:
            time.sleep(self.args.step_time)
        self.step += 1
        if self.progress:
            self.progress.write("%d %s %d %.3f\n"
                                % (self.rank, self.generation, self.step, time.time()))
        return float(loss)

    def run(self):
        self.handler = trainer.install_checkpoint_handler(lambda: None, signal.SIGUSR1, defer=True)
        self.resume()
        recycler_notify.ready()
        while self.step < self.args.steps:
            loss = self.train_step()
            if self.checkpoint_asked():
                self.checkpoint()
            every = self.args.checkpoint_every
            if every and self.step % every == 0 and self.rank == 0:
                self.save()
            if self.step % 50 == 0 and self.rank == 0:
                print("step %d/%d: loss %.4f" % (self.step, self.args.steps, loss), flush=True)
        dist.barrier()
        print("rank %d: training done at step %d" % (self.rank, self.step), flush=True)
        return 0


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    try:
        return Rank(args).run()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
