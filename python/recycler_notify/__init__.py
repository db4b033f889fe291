"""Tell recycler (or systemd) how this process is doing, over $NOTIFY_SOCKET.

recycler starts every worker with NOTIFY_SOCKET set, so programs that already
call sd_notify(3) work unchanged. This module speaks the same protocol plus
recycler's extensions, with the standard library only::

    import recycler_notify as rn

    rn.ready()                      # READY=1: startup finished
    rn.status("loaded model v3")    # STATUS=...: shown in recycler's log
    rn.requests()                   # RECYCLER_REQUESTS=1: one more request served
    rn.flush()                      # sends the request counts held back (see below)
    rn.checkpointed()               # RECYCLER_CHECKPOINTED=1: the checkpoint asked for is saved
    rn.device_bytes(n)              # RECYCLER_DEVICE_BYTES=n: accelerator memory in use
    rn.iteration(i)                 # RECYCLER_ITERATION=i: iteration i is about to start
    rn.watchdog()                   # WATCHDOG=1: still alive (the program's watchdog: timeout)
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

    python3 -m recycler_notify READY=1 "STATUS=warming up"

Installed with recycler's Debian package (/usr/lib/python3/dist-packages), by
``pip install ./python`` from recycler's checkout, or found through
PYTHONPATH=<checkout>/python. Two submodules go with it:
recycler_notify.trainer (checkpoint-and-restart for a training loop) and
recycler_notify.gunicorn (hooks for a gunicorn config file).

Importing it also arms recycler's `diagnose:` signal where the program has
one (RECYCLER_DIAGNOSE_SIGNAL in the environment): on it, faulthandler writes
every thread's Python stack to stderr, which recycler logs before it recycles
a hung or leaking worker. It is written from the signal handler itself, so a
main thread stuck in a lock or a C call still shows where.

Every call is a no-op when NOTIFY_SOCKET is unset and none ever raises: a
supervisor that went away must not break a request. Each returns True when the
message was sent. Lifecycle messages wait at most a second for room in the
supervisor's queue; request counts never wait: a count that cannot be sent at
once is kept and added to the next one. Each process uses its own socket,
created again after a fork, so that a pre-fork server's workers report for
themselves (the supervisor tells senders apart by their pid).

Request counts go in batches while no limit can be near. recycler puts
RECYCLER_REQUESTS_BATCH_BELOW=N in its workers' environment: its smallest
per-process request limit ("unlimited" when none of its policies acts on a
process's count). A process sends its first request at once, then holds its
counts until it has served N (sending what it holds at most BATCH_SECONDS
after the last report: with its next request, or from a timer when no
request comes, so that an idle process leaves nothing uncounted), and from
its Nth request on
sends each one as it is served: recycler still decides on the very request
that reaches a limit, for one datagram every N requests or so instead of one a
request. Without the variable every request is sent as it is served.
stopping() carries what is held; a process that ends otherwise calls flush().

Where recycler draws a limit for each process (max_requests with scope:
process, N > 1), it also answers: each process's socket has an address of its
own (autobind), and recycler tells it, after its first report, the limit it
drew for it (RECYCLER_REQUEST_LIMIT=L). The process then holds its counts
until it has served L, sends them in one report and waits, in that call to
requests() (at most LIMIT_WAIT_SECONDS), until recycler answers that it has
acted on it (RECYCLER_REQUESTS_SEEN=n): by then recycler's signal has reached
the process, so a server that checks for it between requests (gunicorn's
workers do) serves none past its limit, however fast requests come. A
recycler that does not answer leaves the batching above as it was.
"""

import faulthandler
import os
import select
import socket
import sys
import threading
import time

__all__ = ["notify", "ready", "status", "requests", "flush", "checkpointed", "device_bytes",
           "iteration", "stopping"]

MAX_REQUESTS_PER_MESSAGE = 1_000_000  # the supervisor rejects larger counts
WAIT_SECONDS = 1.0  # how long a lifecycle message may wait for a full queue
BATCH_SECONDS = 1.0  # the longest a busy process holds request counts back
BATCH_BELOW_VARIABLE = "RECYCLER_REQUESTS_BATCH_BELOW"
ANSWER_SECONDS = 0.2  # after a report, how long requests() looks for recycler's limit
LIMIT_WAIT_SECONDS = 1.0  # the longest requests() waits at the limit for recycler's answer

_lock = threading.Lock()
_pid = None  # the process _sock belongs to
_sock = None
_pending_requests = 0  # counted here, not yet sent
_served = 0  # requests() counted in this process, sent or not
_batch_below = 1  # from the environment, read once per process: 1 holds nothing back
_NEVER = float("-inf")
_sent_at = _NEVER  # time.monotonic() of the last count sent
_limit = None  # the request limit recycler drew for this process, once it said
_answer_until = _NEVER  # requests() looks for recycler's answer until then
_waited = False  # the report that reached _limit was sent (and its answer waited for)
_idle_flush = None  # the timer that sends held counts when no request comes
_clock = time.monotonic


def _forget_process():
    """What belongs to one process only: a fork starts afresh."""
    global _pid, _sock, _pending_requests, _served, _sent_at, _limit, _answer_until, _waited
    global _idle_flush
    _pid, _sock, _pending_requests, _served, _sent_at = None, None, 0, 0, _NEVER
    _limit, _answer_until, _waited = None, _NEVER, False
    _idle_flush = None  # the parent's timer thread does not exist in a child


def _reset_in_child():
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it
    # The parent's socket and uncounted requests are the parent's: a fork
    # through os.fork (a pre-fork server's workers) starts afresh, and
    # requests() can trust _sock without asking for its pid each time.
    _forget_process()


def _read_batch_below():
    """RECYCLER_REQUESTS_BATCH_BELOW: how many requests may be held back; 1 (none) if unset."""
    value = os.environ.get(BATCH_BELOW_VARIABLE, "").strip()
    if value == "unlimited":
        return float("inf")
    try:
        return max(1, int(value))
    except ValueError:
        return 1


os.register_at_fork(after_in_child=_reset_in_child)


def _wants_answers():
    """recycler draws a limit for each process when the smallest one is a
    number above 1 (RECYCLER_REQUESTS_BATCH_BELOW); with 1, every request is
    reported as it is served and no answer is waited for."""
    return 1 < _batch_below < float("inf")


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
    global _pid, _batch_below
    if _pid != os.getpid():
        _forget_process()
        _pid = os.getpid()
        _batch_below = _read_batch_below()


def _connected(address):
    """This process's socket, connected: then a full queue reads as not writable."""
    global _sock
    with _lock:
        _this_process()
        if _sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            try:
                sock.setblocking(False)
                if _wants_answers():
                    try:
                        # An address of its own (the kernel picks an abstract
                        # one), so that recycler can answer; connected, it
                        # hears no one else.
                        sock.bind("")
                    except OSError:
                        pass  # no answers: batching as before
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
    """STOPPING=1, with the request counts held back: the process serves no more."""
    held = _take_pending()
    if not held:
        return notify(STOPPING=1)
    if notify(STOPPING=1, RECYCLER_REQUESTS=held):
        return True
    _give_back(held)
    return False


def checkpointed():
    return notify(RECYCLER_CHECKPOINTED=1)


def watchdog():
    """WATCHDOG=1: still alive. With the program's `watchdog: {timeout: T}`
    (WATCHDOG_USEC in the environment), send it at least every T, as systemd's
    services do every WatchdogSec=; an iteration() counts as well."""
    return notify(WATCHDOG=1)


def device_bytes(n):
    return notify(RECYCLER_DEVICE_BYTES=int(n))


def iteration(n, device_bytes=None):
    """Marks the boundary before iteration `n` (any number that changes from one
    iteration to the next); with `device_bytes`, the accelerator memory in use
    goes in the same message, so that the level between iterations is exact."""
    if device_bytes is None:
        return notify(RECYCLER_ITERATION=int(n))
    return notify(RECYCLER_DEVICE_BYTES=int(device_bytes), RECYCLER_ITERATION=int(n))


def requests(n=1):
    """Counts `n` more completed requests; sends them now or with a later call
    (see the module's docstring). False when nothing could be sent. The call
    that reaches the limit recycler drew for this process returns once
    recycler has acted on it (at most LIMIT_WAIT_SECONDS later)."""
    global _served, _pending_requests, _sent_at
    try:
        n = int(n)
        now = _clock()
        with _lock:
            # A fork forgets _sock (_reset_in_child): while it is set,
            # _this_process() has run in this process, whose settings and
            # counts these are.
            counted = _sock is not None
            if counted:
                _served += n
                _pending_requests += n
                if _limit is None and now < _answer_until:
                    _read_answers(_sock)
                holds_below = _batch_below if _limit is None else _limit
                if _served < holds_below and now - _sent_at < BATCH_SECONDS:
                    _arm_idle_flush()
                    return True
        return _send_requests(0 if counted else n, now)
    except Exception:
        return False


def _read_answers(sock, timeout=0, until_seen=False):
    """Reads what recycler answered: what is queued, waiting up to `timeout`
    seconds for a first answer (with until_seen, for a RECYCLER_REQUESTS_SEEN=).
    Returns the largest RECYCLER_REQUESTS_SEEN= read, or None."""
    global _limit
    seen = None
    answered = False
    deadline = _clock() + timeout
    while True:
        try:
            data = sock.recv(512)
        except BlockingIOError:
            left = deadline - _clock()
            if (seen is not None if until_seen else answered) or left <= 0:
                return seen
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            poller.poll(left * 1000)  # a signal handler may run meanwhile: that is the point
            continue
        except OSError:
            return seen  # recycler went away: the next send reconnects
        answered = True
        for line in data.decode("ascii", "replace").splitlines():
            key, _, value = line.partition("=")
            if not value.isdigit():
                continue
            if key == "RECYCLER_REQUEST_LIMIT":
                _limit = int(value)
            elif key == "RECYCLER_REQUESTS_SEEN":
                seen = max(seen or 0, int(value))


def _arm_idle_flush():
    """Under _lock, with counts held: sends them BATCH_SECONDS from now
    unless a request sends them first (a process that goes idle holds none)."""
    global _idle_flush
    if _idle_flush is not None:
        return
    timer = threading.Timer(BATCH_SECONDS, _flush_when_idle)
    timer.daemon = True  # never keeps a process from exiting
    _idle_flush = timer
    timer.start()


def _flush_when_idle():
    global _idle_flush, _sent_at
    with _lock:
        if _idle_flush is not threading.current_thread():
            return  # a fork, or another timer since
        _idle_flush = None
    if flush():
        with _lock:
            _sent_at = _clock()


def flush():
    """Sends the request counts held back, if any; True when nothing is left held."""
    held = _take_pending()
    if not held:
        return True
    if _send("RECYCLER_REQUESTS=%d" % held, 0):
        return True
    _give_back(held)
    return False


def _take_pending():
    global _pending_requests
    with _lock:
        held = min(_pending_requests, MAX_REQUESTS_PER_MESSAGE)
        _pending_requests -= held
    return held


def _give_back(count):
    global _pending_requests
    with _lock:
        _pending_requests += count


def _send_requests(n, now):
    """Sends what is pending plus `n` requests not counted yet (a first call);
    at this process's limit, waits for recycler to have acted on it."""
    global _served, _pending_requests, _sent_at, _answer_until, _waited
    if _address() is None:
        return False
    with _lock:
        _this_process()
        _served += n
        _pending_requests += n
        count = min(_pending_requests, MAX_REQUESTS_PER_MESSAGE)
        _pending_requests -= count
        at_limit = _limit is not None and _served >= _limit and not _waited
    if not _send("RECYCLER_REQUESTS=%d" % count, 0):
        _give_back(count)
        return False
    with _lock:
        _sent_at = now
        if _limit is None and _wants_answers():
            _answer_until = now + ANSWER_SECONDS
        if at_limit:
            _waited = True
        sock = _sock
    if at_limit and sock is not None:
        _read_answers(sock, LIMIT_WAIT_SECONDS, until_seen=True)
    return True


def _arm_diagnose_signal():
    """faulthandler on RECYCLER_DIAGNOSE_SIGNAL (recycler's diagnose.signal), if set."""
    value = os.environ.get("RECYCLER_DIAGNOSE_SIGNAL", "")
    if not value.isdigit():
        return False
    try:
        faulthandler.register(int(value), all_threads=True, chain=False)
    except (ValueError, RuntimeError, OSError):
        return False
    return True


_arm_diagnose_signal()


def _main(argv):
    if not argv or any(a in ("-h", "--help") for a in argv):
        print("usage: python3 -m recycler_notify KEY=VALUE...", file=sys.stderr)
        return 2
    if _address() is None:
        return 0  # not supervised: nothing to tell, like the module's calls
    if not notify("\n".join(argv)):
        print("recycler_notify: could not send to NOTIFY_SOCKET=%s" % os.environ["NOTIFY_SOCKET"],
              file=sys.stderr)
        return 1
    return 0
