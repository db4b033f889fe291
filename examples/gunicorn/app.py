"""A tiny WSGI app for recycler's gunicorn example.

GET /          -> "pid <worker pid>\n": which worker served the request
GET /leak?mb=N -> keeps N more MiB alive in this worker, for memory-policy demos
"""

import os
from urllib.parse import parse_qs

_leaked = []  # lives as long as the worker process: what a recycle gives back


def _respond(start_response, status, body):
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
    return [data]


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if environ.get("REQUEST_METHOD") != "GET":
        return _respond(start_response, "405 Method Not Allowed", "GET only\n")
    if path == "/":
        return _respond(start_response, "200 OK", "pid %d\n" % os.getpid())
    if path == "/leak":
        try:
            mb = int(parse_qs(environ.get("QUERY_STRING", "")).get("mb", ["1"])[0])
        except ValueError:
            mb = -1
        if not 0 <= mb <= 1024:
            return _respond(start_response, "400 Bad Request", "mb must be 0..1024\n")
        # Filled, not zeroed: untouched zero pages would not count as resident memory.
        _leaked.append(b"\xa5" * (mb << 20))
        held = sum(len(b) for b in _leaked) >> 20
        return _respond(start_response, "200 OK", "pid %d holds %d MiB\n" % (os.getpid(), held))
    return _respond(start_response, "404 Not Found", "not found\n")


application = app
