"""Make gunicorn replace a recycled worker at once, for its config file.

gunicorn (20.1 to 23) loses most of its capacity to frequent recycling in two
places, whoever does the recycling (its own max_requests or recycler):

- A worker that leaves runs the interpreter's teardown after its last request:
  with a pre-forked heap that is tens of milliseconds of CPU (every object is
  freed, and every page it touches is copied), and the master forks the
  replacement only once the old worker has exited.
- After forking each worker the master sleeps up to 100 ms (spawn_workers),
  and reaps and forks nothing meanwhile: a second worker recycled then waits.

And one race that frequent recycling makes common: a worker sent SIGTERM
between its fork and the moment it sets its own signal handlers (its master
is being stopped just as it replaces a worker: a whole-server restart) runs
the master's handler, which queues the signal in the worker's copy of the
master's queue: the worker never hears it, serves alone on the shared socket
until the master kills it after graceful_timeout, and the request in hand then
fails.

In a gunicorn config file (see examples/gunicorn/gunicorn.conf.py)::

    import recycler_notify.gunicorn as recycler_gunicorn

    def on_starting(server):
        recycler_gunicorn.no_spawn_pause(server)

    def worker_exit(server, worker):
        recycler_gunicorn.leave_now()

    def post_worker_init(worker):
        recycler_gunicorn.honour_early_stop(worker)

leave_now() skips what the teardown would run: atexit handlers, and flushing
what is buffered but not in sys.stdout, sys.stderr or a logging handler (the
ones it flushes). Leave it out if the app needs those at exit. Standard
library only: gunicorn itself is imported only by honour_early_stop(), from
the worker it runs in.
"""

import logging
import os
import signal
import sys

__all__ = ["leave_now", "no_spawn_pause", "honour_early_stop"]

# What a worker does on them: SIGTERM leaves gracefully, SIGINT and SIGQUIT at once.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def leave_now():
    """From gunicorn's worker_exit hook: ends this worker process now, with the
    status it is leaving with (gunicorn runs the hook while the worker's
    SystemExit goes up: 0, or the boot failure its master stops on), as
    multiprocessing ends a forked child. Returns False, doing nothing, when
    the worker is not leaving through SystemExit (an unexpected error: the
    interpreter handles that as usual)."""
    leaving = sys.exc_info()[1]
    if not isinstance(leaving, SystemExit):
        return False
    code = leaving.code
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        logging.shutdown()  # flushes and closes every logging handler
    except Exception:
        pass
    os._exit(status)


def no_spawn_pause(arbiter):
    """Makes the master fork missing workers back to back, without its random
    pause after each one. Returns False, changing nothing, for an arbiter that
    does not look like gunicorn's."""
    if not all(hasattr(arbiter, a) for a in ("spawn_worker", "num_workers", "WORKERS")):
        return False

    def spawn_workers():
        for _ in range(arbiter.num_workers - len(arbiter.WORKERS)):
            arbiter.spawn_worker()

    arbiter.spawn_workers = spawn_workers
    return True


def honour_early_stop(worker):
    """From gunicorn's post_worker_init hook (the worker's own signal handlers
    are set by then): a stop signal that reached this worker before them sits
    in its copy of the master's signal queue; the worker then leaves as if it
    had heard it, before serving anything. Returns True when it does so."""
    try:
        from gunicorn.arbiter import Arbiter
    except Exception:
        return False
    queued = getattr(Arbiter, "SIG_QUEUE", None)
    if not isinstance(queued, list) or not any(s in queued for s in _STOP_SIGNALS):
        return False
    del queued[:]  # the master's, not this worker's: nothing else reads them here
    worker.alive = False
    return True
