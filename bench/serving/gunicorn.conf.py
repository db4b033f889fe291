# gunicorn settings for bench/serving.sh: 2 sync workers serving app.py.
#
# The script sets, per row:
#   SERVE_BIND        "127.0.0.1:PORT"; unset when recycler hands the socket
#                     over (LISTEN_FDS: gunicorn 20.1 then takes fd 3 and
#                     ignores `bind`)
#   SERVE_ACCESS_LOG  one line per request with the worker's pid ("<1234>")
#   SERVE_ERROR_LOG   gunicorn's own log ("Booting worker", "Autorestarting")
#   SERVE_COUNT=1     report each request to recycler (post_request hook,
#                     python/recycler_notify), and STOPPING=1 once
#                     a recycled worker has left its accept loop (worker_exit)
#   SERVE_READY=1     send READY=1 once a worker has loaded the app
#   SERVE_FAST_RECYCLE=1  recycler_notify.gunicorn's hooks: a
#                     worker that leaves skips the interpreter's teardown, the
#                     master forks without its pause, and a worker signalled
#                     before it set its handlers leaves (FAST_RECYCLE=1 to
#                     serving.sh: every row)
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_here, "..", "..", "python"))  # the checkout's recycler_notify
import recycler_notify  # noqa: E402  (found through the path set just above)
import recycler_notify.gunicorn as recycler_gunicorn  # noqa: E402

wsgi_app = "app:app"
chdir = _here
workers = 2
worker_class = "sync"
graceful_timeout = 5
timeout = 30
if "LISTEN_FDS" not in os.environ:
    bind = os.environ.get("SERVE_BIND", "127.0.0.1:8000")

accesslog = os.environ.get("SERVE_ACCESS_LOG", "-")
access_log_format = '%(p)s "%(r)s" %(s)s'
errorlog = os.environ.get("SERVE_ERROR_LOG", "-")
loglevel = "info"

_count = os.environ.get("SERVE_COUNT") == "1"
_fast = os.environ.get("SERVE_FAST_RECYCLE") == "1"

if _count:

    def post_request(worker, req, environ, resp):
        recycler_notify.requests(1)


if _count or _fast:

    def worker_exit(server, worker):
        # As examples/gunicorn/gunicorn.conf.py: a recycled worker says it has
        # left its accept loop, so the next one due need not wait for its exit.
        if _count:
            recycler_notify.stopping()
        if _fast:
            recycler_gunicorn.leave_now()


if _fast:

    def on_starting(server):
        recycler_gunicorn.no_spawn_pause(server)


_ready = os.environ.get("SERVE_READY") == "1"

if _ready or _fast:
    # gunicorn 20.1's arbiter sends READY=1 itself, and calls when_ready,
    # before it forks a worker; a worker that has loaded the app can serve.
    # With the hooks, a worker told to stop before it could hear it leaves.
    def post_worker_init(worker):
        if _fast and recycler_gunicorn.honour_early_stop(worker):
            return
        if _ready:
            recycler_notify.ready()
