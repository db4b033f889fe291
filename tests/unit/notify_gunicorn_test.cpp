// python/recycler_notify/gunicorn.py, the gunicorn hooks that go with the
// helper, run against stand-ins of gunicorn's arbiter and worker.
#include "tests/unit/notify_support.h"

namespace recycler::notify {
namespace {

using namespace test;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// python/recycler_notify/gunicorn.py, the gunicorn hooks that go with the
// helper: a worker that leaves does so at once, with its status.
TEST(GunicornHelper, ALeavingWorkerEndsAtOnceWithItsStatusAndItsOutputFlushed) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys, atexit
sys.path.insert(0, sys.argv[1])
import recycler_notify.gunicorn as recycler_gunicorn
atexit.register(lambda: print(" atexit ran", flush=True))
print("buffered", end="")
try:
    sys.exit(3)  # gunicorn's "worker failed to boot": its master stops on it
finally:
    recycler_gunicorn.leave_now()  # as from gunicorn's worker_exit hook
)";
  auto [status, printed] = run_python(script);
  EXPECT_EQ(status, 3) << "the status it was leaving with";
  EXPECT_EQ(printed, "buffered") << "flushed, and no atexit handler ran";
}

TEST(GunicornHelper, TheMasterForksMissingWorkersWithoutItsPauseAndOnlyGunicornsIsChanged) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys
sys.path.insert(0, sys.argv[1])
import recycler_notify.gunicorn as recycler_gunicorn
class Arbiter:  # the parts of gunicorn's that it uses
    num_workers = 3
    WORKERS = {101: None}
    forked = 0
    def spawn_worker(self):
        Arbiter.forked += 1
    def spawn_workers(self):
        raise SystemExit("gunicorn's own spawn_workers ran")
arbiter = Arbiter()
assert recycler_gunicorn.no_spawn_pause(arbiter)
arbiter.spawn_workers()
assert Arbiter.forked == 2, Arbiter.forked
assert not recycler_gunicorn.no_spawn_pause(object())
assert recycler_gunicorn.leave_now() is False, "not leaving: nothing to do"
print("ok")
)";
  auto [status, printed] = run_python(script);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(printed, "ok");
}

// A worker sent SIGTERM before it set its own handlers runs the master's
// (gunicorn's real Arbiter.signal): the signal waits in its copy of the
// master's queue, where honour_early_stop() finds it and the worker leaves.
TEST(GunicornHelper, AWorkerSignalledBeforeItsHandlersLeavesAndOtherSignalsAreLeftAlone) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import os, signal, sys, types
sys.path.insert(0, sys.argv[1])
import recycler_notify.gunicorn as recycler_gunicorn
try:
    from gunicorn.arbiter import Arbiter
except ImportError:
    print("no gunicorn")
    sys.exit(0)
master = Arbiter.__new__(Arbiter)  # its handler, as a freshly forked worker has it
master.PIPE = os.pipe()
for sig in (signal.SIGTERM, signal.SIGTTIN):
    signal.signal(sig, master.signal)
worker = types.SimpleNamespace(alive=True)
os.kill(os.getpid(), signal.SIGTTIN)
assert not recycler_gunicorn.honour_early_stop(worker), "TTIN is the master's business"
assert worker.alive
os.kill(os.getpid(), signal.SIGTERM)
assert Arbiter.SIG_QUEUE == [signal.SIGTTIN, signal.SIGTERM], Arbiter.SIG_QUEUE
assert recycler_gunicorn.honour_early_stop(worker)
assert worker.alive is False, "it leaves its loop before serving"
assert Arbiter.SIG_QUEUE == []
print("ok")
)";
  auto [status, printed] = run_python(script);
  EXPECT_EQ(status, 0);
  if (printed == "no gunicorn") GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  EXPECT_EQ(printed, "ok");
}

}  // namespace
}  // namespace recycler::notify
