"""recycler_notify and recycler_notify.trainer against a real AF_UNIX datagram
socket as NOTIFY_SOCKET, with real signals to this process.

    /usr/bin/python3 -m unittest discover -s python/tests    (ctest: python_recycler_notify)
"""

import contextlib
import io
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, PACKAGE_DIR)  # this checkout's package, not an installed one

import recycler_notify  # noqa: E402
import recycler_notify.gunicorn  # noqa: E402
from recycler_notify import trainer  # noqa: E402

WAIT_SECONDS = 5.0  # the longest a test waits for something that should come at once


class Supervisor:
    """The receiving end of NOTIFY_SOCKET, as recycler binds it."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="recycler-notify-test.")
        self.path = os.path.join(self.dir.name, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def receive(self, timeout=WAIT_SECONDS):
        """The next message, or None when none came within `timeout`."""
        if not select.select([self.sock], [], [], timeout)[0]:
            return None
        return self.sock.recv(4096).decode()

    def close(self):
        self.sock.close()
        self.dir.cleanup()


def forget_socket():
    """Closes the module's connected socket: the next call connects afresh, as
    a new process would."""
    if recycler_notify._sock is not None:
        recycler_notify._drop(recycler_notify._sock)


class SupervisedTest(unittest.TestCase):
    """NOTIFY_SOCKET names a socket of this class's."""

    @classmethod
    def setUpClass(cls):
        # One socket for the class: the module keeps its connected socket per process.
        cls.supervisor = Supervisor()
        forget_socket()
        cls._environ = dict(os.environ)
        os.environ["NOTIFY_SOCKET"] = cls.supervisor.path
        os.environ.pop("RECYCLER_REQUESTS_BATCH_BELOW", None)  # each request as it is served

    @classmethod
    def tearDownClass(cls):
        os.environ.clear()
        os.environ.update(cls._environ)
        forget_socket()
        cls.supervisor.close()

    def setUp(self):
        while self.supervisor.receive(timeout=0) is not None:
            pass  # what an earlier test left


class NotifyTest(SupervisedTest):
    def test_lifecycle_messages_reach_the_socket(self):
        self.assertTrue(recycler_notify.ready())
        self.assertEqual(self.supervisor.receive(), "READY=1")
        self.assertTrue(recycler_notify.status("loaded\nmodel v3"))
        self.assertEqual(self.supervisor.receive(), "STATUS=loaded model v3")
        self.assertTrue(recycler_notify.watchdog())
        self.assertEqual(self.supervisor.receive(), "WATCHDOG=1")
        self.assertTrue(recycler_notify.iteration(7, device_bytes=1 << 30))
        self.assertEqual(self.supervisor.receive(),
                         "RECYCLER_DEVICE_BYTES=1073741824\nRECYCLER_ITERATION=7")
        self.assertTrue(recycler_notify.notify("READY=1", STATUS="x"))
        self.assertEqual(self.supervisor.receive(), "READY=1\nSTATUS=x")

    def test_each_request_is_sent_without_a_batch_size(self):
        self.assertTrue(recycler_notify.requests(2))
        self.assertEqual(self.supervisor.receive(), "RECYCLER_REQUESTS=2")
        self.assertTrue(recycler_notify.flush(), "nothing held back")
        self.assertIsNone(self.supervisor.receive(timeout=0))

    def test_counts_held_back_go_out_when_the_process_goes_idle(self):
        # A process of its own: the batch size is read once per process.
        # It serves 5 requests, then none while it idles for 30 s (killed
        # before then): the 4 held after the first must come all the same.
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, RECYCLER_REQUESTS_BATCH_BELOW="100")
        code = ("import time, recycler_notify as r\n"
                "r.BATCH_SECONDS = 0.2\n"
                "for _ in range(5): r.requests()\n"
                "print('served', flush=True)\n"
                "time.sleep(30)\n")
        child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
        try:
            self.assertEqual(child.stdout.readline(), b"served\n")
            self.assertEqual(self.supervisor.receive(), "RECYCLER_REQUESTS=1", "the first at once")
            self.assertEqual(self.supervisor.receive(), "RECYCLER_REQUESTS=4",
                             "the rest from the idle timer")
            self.assertIsNone(child.poll(), "while the process still idles")
        finally:
            child.kill()
            child.wait()

    def test_the_command_line_sends_one_message(self):
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
        done = subprocess.run([sys.executable, "-m", "recycler_notify", "READY=1", "STATUS=hi"],
                              env=env, timeout=30)
        self.assertEqual(done.returncode, 0)
        self.assertEqual(self.supervisor.receive(), "READY=1\nSTATUS=hi")

    def test_a_supervisor_that_is_gone_breaks_nothing(self):
        with unittest.mock.patch.dict(os.environ, {"NOTIFY_SOCKET": self.supervisor.path + ".gone"}):
            forget_socket()
            self.assertFalse(recycler_notify.ready())
        forget_socket()
        with unittest.mock.patch.dict(os.environ):
            del os.environ["NOTIFY_SOCKET"]
            self.assertFalse(recycler_notify.ready(), "unsupervised: a no-op")


class TrainerTest(SupervisedTest):
    """The checkpoint handler, with SIGUSR1 sent to this very process."""

    def setUp(self):
        super().setUp()
        self.saved = []
        self.handler = None

    def tearDown(self):
        if self.handler is not None:
            self.handler.uninstall()

    def save(self):
        self.saved.append(time.monotonic())

    def signal_self(self, signum=signal.SIGUSR1):
        """Sends `signum` to this process and returns once Python has run its handler."""
        asked_before = len(self.saved)
        os.kill(os.getpid(), signum)
        # Python runs the handler between two bytecodes of the main thread:
        # a bounded loop of them, not a sleep.
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline and len(self.saved) == asked_before:
            if self.handler.defer and self.handler.asked:
                return
            time.sleep(0.001)

    def test_the_signal_saves_then_confirms_the_checkpoint(self):
        self.handler = trainer.install_checkpoint_handler(self.save)
        self.signal_self()
        self.assertEqual(len(self.saved), 1)
        self.assertEqual(self.supervisor.receive(), "RECYCLER_CHECKPOINTED=1")
        self.assertFalse(self.handler.asked)

    def test_deferred_the_checkpoint_waits_for_the_step_boundary(self):
        self.handler = trainer.install_checkpoint_handler(self.save, "USR1", defer=True)
        self.assertFalse(self.handler.at_boundary(), "nothing asked yet")
        self.signal_self()
        self.assertTrue(self.handler.asked)
        self.assertEqual(self.saved, [], "saved from the signal handler: mid-step")
        self.assertIsNone(self.supervisor.receive(timeout=0))
        self.assertTrue(self.handler.at_boundary())
        self.assertEqual(len(self.saved), 1)
        self.assertEqual(self.supervisor.receive(), "RECYCLER_CHECKPOINTED=1")
        self.assertFalse(self.handler.at_boundary(), "asked once, saved once")

    def test_a_declined_or_failed_save_confirms_nothing(self):
        self.handler = trainer.install_checkpoint_handler(lambda: False, signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR2)
        self.assertIsNone(self.supervisor.receive(timeout=0.2))
        self.handler.uninstall()

        def fail():
            raise OSError("disk full")

        self.handler = trainer.install_checkpoint_handler(fail, "SIGUSR2")
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors):
            os.kill(os.getpid(), signal.SIGUSR2)  # must not raise here
            self.assertIsNone(self.supervisor.receive(timeout=0.2))
        self.assertIn("disk full", errors.getvalue())

    def test_uninstall_puts_the_previous_handler_back(self):
        def previous(signum, frame):
            pass

        signal.signal(signal.SIGUSR1, previous)
        try:
            self.handler = trainer.install_checkpoint_handler(self.save)
            self.assertIsNot(signal.getsignal(signal.SIGUSR1), previous)
            self.handler.uninstall()
            self.assertIs(signal.getsignal(signal.SIGUSR1), previous)
        finally:
            signal.signal(signal.SIGUSR1, signal.SIG_DFL)

    def test_an_unknown_signal_name_is_refused(self):
        with self.assertRaises(ValueError):
            trainer.install_checkpoint_handler(self.save, "NOSUCH")

    def test_resume_and_reason_come_from_the_environment(self):
        with unittest.mock.patch.dict(os.environ):
            os.environ.pop("RECYCLER_RESUME", None)
            os.environ.pop("RECYCLER_RECYCLE_REASON", None)
            self.assertFalse(trainer.resuming())
            self.assertIsNone(trainer.recycle_reason())
            os.environ["RECYCLER_RESUME"] = "1"
            os.environ["RECYCLER_RECYCLE_REASON"] = "leak: anon 400MiB"
            self.assertTrue(trainer.resuming())
            self.assertEqual(trainer.recycle_reason(), "leak: anon 400MiB")


class DiagnoseSignalTest(unittest.TestCase):
    """recycler's diagnose.signal: every thread's stack on stderr, from a child
    that is busy in a call when the signal comes."""

    def test_the_signal_dumps_every_threads_stack(self):
        code = ("import os, signal, sys, time\n"
                "import recycler_notify\n"
                "def busy_in_a_call():\n"
                "    os.kill(os.getpid(), signal.SIGUSR2)\n"
                "    time.sleep(0.2)\n"
                "busy_in_a_call()\n"
                "print('still running', flush=True)\n")
        env = dict(os.environ, RECYCLER_DIAGNOSE_SIGNAL=str(int(signal.SIGUSR2)),
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("in busy_in_a_call", done.stderr)
        self.assertIn("still running", done.stdout)

    def test_without_the_variable_nothing_is_armed(self):
        with unittest.mock.patch.dict(os.environ, {"RECYCLER_DIAGNOSE_SIGNAL": ""}):
            self.assertFalse(recycler_notify._arm_diagnose_signal())


class GunicornHooksTest(unittest.TestCase):
    def test_the_hooks_leave_what_is_not_gunicorns_alone(self):
        hooks = recycler_notify.gunicorn
        self.assertFalse(hooks.no_spawn_pause(object()))
        self.assertFalse(hooks.leave_now(), "not leaving: nothing to do")


if __name__ == "__main__":
    unittest.main()
