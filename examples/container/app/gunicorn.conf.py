# gunicorn settings for mlapp under recycler (examples/container/recycler.yaml):
# one worker process with two threads, as seed 002 ran Django on a 512 MB box.
#
#   cd /srv/app && python3 -m gunicorn -c gunicorn.conf.py     # alone, on BIND
#
# recycler_notify (installed by recycler's .deb) is how the worker talks to
# recycler over NOTIFY_SOCKET: each request counted (max_requests), READY=1
# once the app is loaded (/readyz), STOPPING=1 once a recycled worker stops
# accepting. See examples/gunicorn/gunicorn.conf.py for each hook at length.
import os

import recycler_notify
import recycler_notify.gunicorn as recycler_gunicorn

chdir = os.path.dirname(os.path.abspath(__file__))
wsgi_app = "mlapp.wsgi:application"

# Under recycler with `listen:` gunicorn takes the socket it is handed
# (LISTEN_FDS) and ignores bind.
bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WORKERS", "1"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "2"))
# A recycled worker (SIGTERM to that pid from recycler) finishes its requests
# within this; recycler's stop.timeout (15 s) is longer, the pod's
# terminationGracePeriodSeconds (30 s) longer still.
graceful_timeout = 10
timeout = 30
# recycler draws a request limit per worker process (max_requests policy):
# gunicorn's own stays off.
max_requests = 0

accesslog = "-"
access_log_format = '%(h)s %(p)s "%(r)s" %(s)s %(b)s %(M)sms'


def post_request(worker, req, environ, resp):
    recycler_notify.requests(1)


def post_worker_init(worker):
    if not recycler_gunicorn.honour_early_stop(worker):
        recycler_notify.ready()


def worker_exit(server, worker):
    recycler_notify.stopping()
    recycler_gunicorn.leave_now()


def on_starting(server):
    recycler_gunicorn.no_spawn_pause(server)
