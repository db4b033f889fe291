"""Tell recycler (or systemd) how this process is doing, over $NOTIFY_SOCKET.

recycler starts every worker with NOTIFY_SOCKET set, so programs that already
call sd_notify(3) work unchanged. This module speaks the same protocol plus
recycler's extensions, with the standard library only::

    import recycler_notify as rn

    rn.ready()                      # READY=1: startup finished
    rn.status("loaded model v3")    # STATUS=...: shown in recycler's log
    rn.requests()                   # RECYCLER_REQUESTS=1: one more request served
    rn.checkpointed()               # RECYCLER_CHECKPOINTED=1: the checkpoint asked for is saved
    rn.device_bytes(n)              # RECYCLER_DEVICE_BYTES=n: accelerator memory in use
    rn.iteration(i)                 # RECYCLER_ITERATION=i: iteration i is about to start
    rn.stopping()                   # STOPPING=1: shutting down of our own accord
    rn.notify(READY=1, STATUS="x")  # any fields, or a preformatted rn.notify("READY=1\\nSTATUS=x")

Mark each iteration of a loop (a decode, a training step, a batch) at its
start, before it allocates anything, with the device memory in use if the
program reports it; the leak policy then projects the growth per iteration and
acts between two of them::

    for i, batch in enumerate(batches):
        rn.iteration(i, device_bytes=device.memory_stats()["bytes_in_use"])
        decode(batch)

From a shell (handy for shell workers)::

    python3 recycler_notify.py READY=1 "STATUS=warming up"

Copy this file into your project, or put its directory on sys.path.

Every call is a no-op when NOTIFY_SOCKET is unset and none ever raises: a
supervisor that went away must not break a request. Each returns True when the
message was sent. Lifecycle messages wait at most a second for room in the
supervisor's queue; request counts never wait: a count that cannot be sent at
once is kept and added to the next one. Each process uses its own socket,
created again after a fork, so that a pre-fork server's workers report for
themselves (the supervisor tells senders apart by their pid).
"""

import os
import select
import socket
import sys
import threading

__all__ = ["notify", "ready", "status", "requests", "checkpointed", "device_bytes", "iteration",
           "stopping"]

MAX_REQUESTS_PER_MESSAGE = 1_000_000  # the supervisor rejects larger counts
WAIT_SECONDS = 1.0  # how long a lifecycle message may wait for a full queue

_lock = threading.Lock()
_pid = None  # the process _sock belongs to
_sock = None
_pending_requests = 0  # counted here, not yet sent


def _reset_in_child():
    global _lock, _pid, _sock, _pending_requests
    _lock = threading.Lock()  # another thread of the parent may have held it
    # The parent's socket and uncounted requests are the parent's: a fork
    # through os.fork (a pre-fork server's workers) starts afresh, and
    # requests() can trust _sock without asking for its pid each time.
    _pid, _sock, _pending_requests = None, None, 0


os.register_at_fork(after_in_child=_reset_in_child)


def _address():
    """NOTIFY_SOCKET as a socket address, or None when there is nothing to talk to."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        return "\0" + address[1:]  # the abstract namespace
    if address.startswith("/"):
        return address
    return None  # unset, or a kind this module does not speak (vsock:...)


def _this_process():
    """Called with _lock held: forgets what a parent process left behind."""
    global _pid, _sock, _pending_requests
    if _pid != os.getpid():
        _pid, _sock, _pending_requests = os.getpid(), None, 0


def _connected(address):
    """This process's socket, connected: then a full queue reads as not writable."""
    global _sock
    with _lock:
        _this_process()
        if _sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            try:
                sock.setblocking(False)
                sock.connect(address)
            except OSError:
                sock.close()
                raise
            _sock = sock
        return _sock


def _drop(sock):
    """Forgets a socket that failed (the supervisor restarted, say): the next call reconnects."""
    global _sock
    with _lock:
        if _sock is sock:
            _sock = None
    sock.close()


def _send(text, wait):
    address = _address()
    if address is None:
        return False
    sock = None
    try:
        sock = _connected(address)
        data = text.encode("utf-8", "replace")
        try:
            sock.send(data)
            return True
        except BlockingIOError:
            if wait <= 0:
                return False
            poller = select.poll()
            poller.register(sock, select.POLLOUT)
            if not poller.poll(wait * 1000):
                return False
            sock.send(data)
            return True
    except BlockingIOError:
        return False  # still full after waiting
    except Exception:  # never raise into the caller's request
        if sock is not None:
            _drop(sock)
        return False


def _value(v):
    if v is True:
        return "1"
    return str(v).replace("\n", " ")  # a newline would start another assignment


def notify(text=None, /, **fields):
    """Sends `text` (KEY=VALUE lines) and/or `fields` (KEY=value) in one message."""
    try:
        lines = [] if text is None else [str(text)]
        lines += ["%s=%s" % (key, _value(v)) for key, v in fields.items()]
        return _send("\n".join(lines), WAIT_SECONDS)
    except Exception:
        return False


def ready():
    return notify(READY=1)


def status(text):
    return notify(STATUS=text)


def stopping():
    return notify(STOPPING=1)


def checkpointed():
    return notify(RECYCLER_CHECKPOINTED=1)


def device_bytes(n):
    return notify(RECYCLER_DEVICE_BYTES=int(n))


def iteration(n, device_bytes=None):
    """Marks the boundary before iteration `n` (any number that changes from one
    iteration to the next); with `device_bytes`, the accelerator memory in use
    goes in the same message, so that the level between iterations is exact."""
    if device_bytes is None:
        return notify(RECYCLER_ITERATION=int(n))
    return notify(RECYCLER_DEVICE_BYTES=int(device_bytes), RECYCLER_ITERATION=int(n))


_ONE_REQUEST = b"RECYCLER_REQUESTS=1"


def requests(n=1):
    """Counts `n` more completed requests; what cannot be sent now goes with the next call."""
    # Called once per request: the common case (one request, nothing kept
    # back, this process's socket connected) is one send and nothing else.
    sock = _sock
    if sock is not None and n == 1 and not _pending_requests:
        try:
            sock.send(_ONE_REQUEST)
            return True
        except Exception:
            pass  # a full queue or a gone supervisor: counted below, as any call
    return _requests(n)


def _requests(n):
    global _pending_requests
    try:
        if _address() is None:
            return False
        with _lock:
            _this_process()
            _pending_requests += int(n)
            count = min(_pending_requests, MAX_REQUESTS_PER_MESSAGE)
            _pending_requests -= count
        if _send("RECYCLER_REQUESTS=%d" % count, 0):
            return True
        with _lock:
            _pending_requests += count
        return False
    except Exception:
        return False


def _main(argv):
    if not argv or any(a in ("-h", "--help") for a in argv):
        print("usage: %s KEY=VALUE..." % os.path.basename(sys.argv[0]), file=sys.stderr)
        return 2
    if _address() is None:
        return 0  # not supervised: nothing to tell, like the module's calls
    if not notify("\n".join(argv)):
        print("recycler_notify: could not send to NOTIFY_SOCKET=%s" % os.environ["NOTIFY_SOCKET"],
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
