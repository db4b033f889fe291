"""The trivial WSGI app bench/serving.sh loads: `GET /` answers "ok".

Standard library only, so that what the benchmark measures is the server and
its recycling, not the app.
"""

_BODY = b"ok\n"
_HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(_BODY)))]


def app(environ, start_response):
    start_response("200 OK", _HEADERS)
    return [_BODY]
