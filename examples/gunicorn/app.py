"""A tiny WSGI app for recycler's gunicorn example.

GET /          -> "pid <worker pid>\n": which worker served the request
GET /leak?mb=N -> keeps N more MiB alive in this worker, for memory-policy demos
GET /work?ms=N -> "pid <worker pid>\n" after N ms (0..1000) spent waiting, as a
                  view waits on its database: a request that is not free
"""

import os
import time
from urllib.parse import parse_qs

_leaked = []  # lives as long as the worker process: what a recycle gives back


def _respond(start_response, status, body):
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
    return [data]


def _number(environ, key, default):
    """The query's integer `key`, or -1 when it is not one."""
    try:
        return int(parse_qs(environ.get("QUERY_STRING", "")).get(key, [str(default)])[0])
    except ValueError:
        return -1


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if environ.get("REQUEST_METHOD") != "GET":
        return _respond(start_response, "405 Method Not Allowed", "GET only\n")
    if path == "/":
        return _respond(start_response, "200 OK", "pid %d\n" % os.getpid())
    if path == "/work":
        ms = _number(environ, "ms", 1)
        if not 0 <= ms <= 1000:
            return _respond(start_response, "400 Bad Request", "ms must be 0..1000\n")
        time.sleep(ms / 1000)
        return _respond(start_response, "200 OK", "pid %d\n" % os.getpid())
    if path == "/leak":
        mb = _number(environ, "mb", 1)
        if not 0 <= mb <= 1024:
            return _respond(start_response, "400 Bad Request", "mb must be 0..1024\n")
        # Filled, not zeroed: untouched zero pages would not count as resident memory.
        _leaked.append(b"\xa5" * (mb << 20))
        held = sum(len(b) for b in _leaked) >> 20
        return _respond(start_response, "200 OK", "pid %d holds %d MiB\n" % (os.getpid(), held))
    return _respond(start_response, "404 Not Found", "not found\n")


application = app
