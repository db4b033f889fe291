"""Checkpoint-and-restart for a training loop under recycler (standard library only).

When a leak policy's `action: checkpoint` (or a memory policy's) fires,
recycler sends the worker its `checkpoint.signal` (SIGUSR1 unless the config
says otherwise) and waits up to `checkpoint.timeout` for
RECYCLER_CHECKPOINTED=1 on NOTIFY_SOCKET; then it restarts the worker with
RECYCLER_RESUME=1 (and RECYCLER_RECYCLE_REASON, why) in its environment. A
worker that never confirms is restarted anyway at the timeout, without
RECYCLER_RESUME (`on_timeout: restart`). This module is the worker's half::

    from recycler_notify import trainer

    checkpoint = trainer.install_checkpoint_handler(save, defer=True)
    if trainer.resuming():
        load()                      # the state save() wrote before the restart
    while not done:
        train_step()
        checkpoint.at_boundary()    # saves and reports here if recycler asked

With defer=True the signal only records the request and the loop saves at its
next step boundary, where its state is whole; without it, the signal handler
calls save() at once (between two Python bytecodes of the main thread), for a
loop whose state is consistent at any point, or one that saves what it can.

save() takes no argument. It returns None or True once the checkpoint is
written (then RECYCLER_CHECKPOINTED=1 goes to recycler), or False to decline
(nothing is reported: recycler restarts the worker at its timeout, as
`on_timeout` says). Write the checkpoint atomically (a temporary file, then
os.replace): recycler may stop the worker any time after it is confirmed.
"""

import os
import signal
import sys
import traceback

import recycler_notify

__all__ = ["install_checkpoint_handler", "CheckpointHandler", "resuming", "recycle_reason"]

RESUME_VARIABLE = "RECYCLER_RESUME"
REASON_VARIABLE = "RECYCLER_RECYCLE_REASON"


def resuming():
    """True when recycler started this process after a confirmed checkpoint
    (RECYCLER_RESUME=1): load the checkpoint instead of starting afresh."""
    return os.environ.get(RESUME_VARIABLE) == "1"


def recycle_reason():
    """Why recycler restarted this process (RECYCLER_RECYCLE_REASON: the policy
    that acted and its figures), or None on a first start."""
    return os.environ.get(REASON_VARIABLE) or None


def _signal_number(signum):
    """A signal as int from an int, a signal.Signals, or a name as recycler's
    config spells it ("USR1", "SIGUSR1")."""
    if isinstance(signum, str):
        name = signum.strip().upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        try:
            return signal.Signals[name]
        except KeyError:
            raise ValueError("unknown signal %r" % signum) from None
    return signal.Signals(signum)


class CheckpointHandler:
    """The signal handler install_checkpoint_handler() set. `asked` is True
    between recycler's request and the save that answers it (defer=True)."""

    def __init__(self, save, signum, defer):
        self._save = save
        self.signum = signum
        self.defer = defer
        self.asked = False
        self._saving = False
        self._installed = False
        self._previous = signal.SIG_DFL

    def _on_signal(self, signum, frame):
        self.asked = True
        if not self.defer and not self._saving:
            try:
                self.at_boundary()
            except Exception:
                # Raised out of a signal handler it would land anywhere in the
                # loop: the checkpoint is not confirmed, recycler decides.
                print("recycler_notify.trainer: the checkpoint's save failed:", file=sys.stderr)
                traceback.print_exc()

    def at_boundary(self):
        """Saves and reports RECYCLER_CHECKPOINTED=1 when a checkpoint was
        asked for since the last call; returns True when it did both. An
        exception from save() goes to the caller (the request is dropped:
        recycler's timeout decides, as for a declined save)."""
        if not self.asked:
            return False
        self.asked = False
        self._saving = True
        try:
            if self._save() is False:
                return False
        finally:
            self._saving = False
        return recycler_notify.checkpointed()

    def uninstall(self):
        """Puts back the handler that was there before."""
        if self._installed:
            signal.signal(self.signum, self._previous)
            self._installed = False


def install_checkpoint_handler(save, signum=signal.SIGUSR1, defer=False):
    """Sets the handler for `signum` (recycler's `checkpoint.signal`: an int,
    or a name such as "USR1") that calls save() and then reports
    RECYCLER_CHECKPOINTED=1 to recycler; with defer=True, save() waits for the
    loop's next CheckpointHandler.at_boundary(). From the main thread, as
    signal.signal() requires. Returns the CheckpointHandler."""
    handler = CheckpointHandler(save, _signal_number(signum), defer)
    previous = signal.signal(handler.signum, handler._on_signal)
    # None: a handler set from outside Python, which cannot be put back.
    handler._previous = signal.SIG_DFL if previous is None else previous
    handler._installed = True
    return handler
