# gunicorn settings for running examples/gunicorn/app.py under recycler.
#
#   PYTHONPATH=python /usr/bin/python3 -m gunicorn -c examples/gunicorn/gunicorn.conf.py
#
# Each worker counts every request it served for recycler over NOTIFY_SOCKET
# (the post_request hook below), so recycler counts requests per worker pid.
# recycler tells each worker the limit it drew for it; the helper holds the
# counts until the worker reaches it, reports them then and waits in the hook
# until recycler has signalled the worker, which leaves after that request.
#
# recycler_notify is the recycler package's Python module (python/ in the
# checkout, which gunicorn.yaml puts on PYTHONPATH; installed with the .deb).
import os

import recycler_notify
import recycler_notify.gunicorn as recycler_gunicorn

_here = os.path.dirname(os.path.abspath(__file__))

wsgi_app = "app:app"
chdir = _here

# Under recycler with `listen:` gunicorn takes the socket it is handed
# (LISTEN_FDS) and ignores this.
bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WORKERS", "3"))
worker_class = "sync"
# A worker recycler asks to go (SIGTERM to that one pid) finishes its request
# within this, then the master starts a fresh one.
graceful_timeout = 10
timeout = 30

# One line per request with the serving worker's pid (%(p)s prints "<1234>"):
# recycler can count requests from this log instead, with
# `requests: {pattern: '<(?<pid>\d+)> "'}` (then drop post_request below).
accesslog = os.environ.get("ACCESS_LOG", "-")
access_log_format = '%(h)s %(p)s "%(r)s" %(s)s %(b)s %(M)sms'

# gunicorn's own max_requests/max_requests_jitter stay off: recycler does the
# same with a limit drawn per worker at spawn, never lets more than
# max_concurrent_recycles workers of the program go at once (gunicorn's jitter
# can still line several up), logs why each one went, and weighs requests
# together with its memory policies.
max_requests = 0


def post_request(worker, req, environ, resp):
    # Runs in the worker process: the datagrams carry the worker's own pid.
    recycler_notify.requests(1)


def post_worker_init(worker):
    # The app is loaded in this worker: it can serve. gunicorn's master says
    # READY=1 itself, but before it forks any worker; with
    # `recycle: {mode: surge, ready_from: child}` recycler waits for this one
    # before it stops the old generation (gunicorn-surge.yaml). Unless it was
    # told to stop before it could hear it (its master was being stopped as
    # it forked this worker): then it leaves without serving.
    if not recycler_gunicorn.honour_early_stop(worker):
        recycler_notify.ready()


def worker_exit(server, worker):
    # Runs in the worker once it has left its accept loop (it serves no more):
    # recycler then lets the next worker due go at once, instead of holding it
    # back (max_concurrent_process_recycles) until this one has exited. The
    # message carries the requests the helper still held back.
    recycler_notify.stopping()
    # Then it leaves without the interpreter's teardown (30 ms of CPU and more
    # under load), which the master waits for before it forks the replacement.
    # It skips atexit handlers: drop this line if the app needs them.
    recycler_gunicorn.leave_now()


def on_starting(server):
    # Runs in the master: it forks a replacement as soon as a worker has gone,
    # without its random pause of up to 100 ms after each fork. Under frequent
    # recycling these two hooks keep most of the capacity: bench/README.md.
    recycler_gunicorn.no_spawn_pause(server)
