"""Make gunicorn replace a recycled worker at once, for its config file.

gunicorn (20.1 to 23) loses most of its capacity to frequent recycling in two
places, whoever does the recycling (its own max_requests or recycler):

- A worker that leaves runs the interpreter's teardown after its last request:
  with a pre-forked heap that is tens of milliseconds of CPU (every object is
  freed, and every page it touches is copied), and the master forks the
  replacement only once the old worker has exited.
- After forking each worker the master sleeps up to 100 ms (spawn_workers),
  and reaps and forks nothing meanwhile: a second worker recycled then waits.

In a gunicorn config file (see examples/gunicorn/gunicorn.conf.py)::

    import recycler_gunicorn

    def on_starting(server):
        recycler_gunicorn.no_spawn_pause(server)

    def worker_exit(server, worker):
        recycler_gunicorn.leave_now()

leave_now() skips what the teardown would run: atexit handlers, and flushing
what is buffered but not in sys.stdout, sys.stderr or a logging handler (the
ones it flushes). Leave it out if the app needs those at exit. Standard
library only; copy this file into your project, or put its directory on
sys.path.
"""

import logging
import os
import sys

__all__ = ["leave_now", "no_spawn_pause"]


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
