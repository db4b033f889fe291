// recycler as a Slurm job's batch step (examples/slurm): a one-node cluster of
// Debian's slurm-wlm and munge on 127.0.0.1, started once for this binary.
// The job's warning signal (sbatch --signal=B:USR1@T; here `scancel -b -s
// USR1`, which sends it at once) makes recycler checkpoint the trainer, stop
// it, `scontrol requeue` the job and exit; Slurm runs the job again, whose
// trainer resumes from that checkpoint and finishes.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

Ran run(const std::vector<std::string>& argv) {
  return run_command(argv);
}

bool on_path(const std::string& tool) {
  return run({"sh", "-c", "command -v " + tool}).code == 0;
}

pid_t pid_in(const std::string& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// munged, slurmctld and slurmd on 127.0.0.1 with their state in a folder of
// their own (shared/FIELD.md has how and why); SLURM_CONF set for this
// process, so that sbatch, scontrol and the jobs find them.
class Cluster {
 public:
  static std::optional<std::string> missing() {
    for (const char* tool :
         {"munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo"})
      if (!on_path(tool))
        return std::string("no ") + tool +
               " (scripts/install-deps --test installs slurm-wlm and munge)";
    return std::nullopt;
  }

  std::optional<std::string> start() {
    char tmpl[] = "/tmp/recycler-slurm-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::chmod(dir_.c_str(), 0755);  // munged refuses a socket folder others cannot enter
    for (const char* sub : {"state", "spool", "munge"}) fs::create_directory(dir_ + "/" + sub);
    ::chmod((dir_ + "/munge").c_str(), 0700);
    if (run({"mungekey", "-c", "-k", dir_ + "/munge/munge.key"}).code != 0) return "mungekey";
    Ran munged =
        run({"munged", "--key-file=" + dir_ + "/munge/munge.key",
             "--socket=" + dir_ + "/munge.sock", "--pid-file=" + dir_ + "/munged.pid",
             "--log-file=" + dir_ + "/munged.log", "--seed-file=" + dir_ + "/munged.seed"});
    if (munged.code != 0) return "munged: " + munged.out;
    write_conf();
    ::setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
    Ran ctld = run({"slurmctld", "-i"});
    if (ctld.code != 0) return "slurmctld: " + ctld.out + read_text(dir_ + "/slurmctld.log");
    Ran slurmd = run({"slurmd", "-N", "localhost"});
    if (slurmd.code != 0) return "slurmd: " + slurmd.out + read_text(dir_ + "/slurmd.log");
    if (!eventually([] { return run({"sinfo", "-h", "-o", "%T"}).out.find("idle") == 0; }, 30s))
      return "the node never became idle: " + read_text(dir_ + "/slurmd.log");
    return std::nullopt;
  }

  void stop() {
    if (dir_.empty()) return;
    for (const char* daemon : {"slurmd", "slurmctld", "munged"}) {
      pid_t pid = pid_in(dir_ + "/" + daemon + ".pid");
      if (pid > 0 && ::kill(pid, SIGTERM) == 0) wait_gone(pid, 10s);
    }
    // slurmd leaves its empty cgroups behind (v1: one per controller).
    std::error_code ec;
    for (const auto& mount : fs::directory_iterator("/sys/fs/cgroup", ec)) {
      fs::path top = mount.path() / "slurm_localhost";
      if (!fs::is_directory(top, ec)) continue;
      std::vector<fs::path> dirs;
      for (const auto& d : fs::recursive_directory_iterator(top, ec))
        if (d.is_directory(ec)) dirs.push_back(d.path());
      for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir(it->c_str());
      ::rmdir(top.c_str());
    }
    fs::remove_all(dir_, ec);
    ::unsetenv("SLURM_CONF");
  }

  const std::string& dir() const { return dir_; }

 private:
  void write_conf() {
    std::ofstream(dir_ + "/cgroup.conf")
        << "CgroupPlugin=autodetect\nConstrainCores=yes\nConstrainRAMSpace=yes\n";
    std::ofstream(dir_ + "/slurm.conf")
        << "ClusterName=test\nSlurmctldHost=localhost(127.0.0.1)\nSlurmUser=root\n"
           "SlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n"
           "AuthInfo=socket="
        << dir_ << "/munge.sock,cred_expire=5\nStateSaveLocation=" << dir_
        << "/state\nSlurmdSpoolDir=" << dir_ << "/spool\nSlurmctldPidFile=" << dir_
        << "/slurmctld.pid\nSlurmdPidFile=" << dir_ << "/slurmd.pid\nSlurmctldLogFile=" << dir_
        << "/slurmctld.log\nSlurmdLogFile=" << dir_
        << "/slurmd.log\n"
           "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n"
           "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nJobRequeue=1\n"
           "ReturnToService=2\nMpiDefault=none\nMailProg=/bin/true\n"
           "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
           "SchedulerType=sched/backfill\nSchedulerParameters=sched_interval=2,bf_interval=1\n"
           "KillWait=5\nMinJobAge=600\n"
           "NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 Sockets=1 CoresPerSocket=2 "
           "ThreadsPerCore=1 RealMemory=20000 State=UNKNOWN\n"
           "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n";
  }

  std::string dir_;
};

class Slurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "Slurm's daemons need root";
    } else if (auto why = vm_guest_skip()) {
      skip_ = *why;
    } else if (auto absent = Cluster::missing()) {
      skip_ = *absent;
    } else if (auto failed = cluster_.start()) {
      skip_ = "cannot start a one-node Slurm here: " + *failed;
    }
  }
  static void TearDownTestSuite() { cluster_.stop(); }
  void SetUp() override {
    if (skip_) GTEST_SKIP() << *skip_;
  }

  static inline Cluster cluster_;
  static inline std::optional<std::string> skip_;
};

// What `needle` is in the job's output once it is there; nullopt after `timeout`.
std::optional<std::string> line_with(const std::string& out, const std::string& needle,
                                     Millis timeout) {
  std::optional<std::string> found;
  eventually(
      [&] {
        std::istringstream in(read_text(out));
        for (std::string line; std::getline(in, line);)
          if (line.find(needle) != std::string::npos) return (found = line).has_value();
        return false;
      },
      timeout);
  return found;
}

TEST_F(Slurm, APreemptedJobCheckpointsRequeuesAndItsNextRunResumes) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  const std::string example = examples_dir() + "/slurm";
  // The example's job.yaml as it is, with this test's cgroup root and
  // control socket, and its relative cwd made absolute.
  std::string yaml = read_text(example + "/job.yaml");
  size_t cwd = yaml.find("cwd: .");
  ASSERT_NE(cwd, std::string::npos);
  yaml.replace(cwd, 6, "cwd: " + example);
  std::string config =
      sb.write("job.yaml", "cgroup_root: " + sb.cgroup_root() + "\ncontrol: {socket: " + sb.tmp() +
                               "/control.sock}\n" + yaml);
  const std::string out = sb.tmp() + "/job.out";
  // sbatch hands the submitter's environment to the job (--export=ALL).
  ::setenv("RECYCLER", recycler_bin().c_str(), 1);
  ::setenv("RECYCLER_CONFIG", config.c_str(), 1);
  ::setenv("EPOCHS", "4", 1);
  ::setenv("STEP_TIME", "0.1", 1);
  ::setenv("CHECKPOINT", (sb.tmp() + "/train.ckpt.json").c_str(), 1);
  Ran submitted = run({"sbatch", "--parsable", "--output=" + out, "--chdir=" + sb.tmp(),
                       example + "/train.sbatch"});
  ASSERT_EQ(submitted.code, 0) << submitted.out;
  std::string job = submitted.out.substr(0, submitted.out.find_first_of(";\n"));

  ASSERT_TRUE(line_with(out, "epoch 1/4 done", scaled(60s))) << read_text(out);
  auto signalled = std::chrono::steady_clock::now();
  Ran usr1 = run({"scancel", "-b", "-s", "USR1", job});
  ASSERT_EQ(usr1.code, 0) << usr1.out;
  auto preempted = line_with(out, "SIGUSR1: preempted; ", scaled(10s));
  ASSERT_TRUE(preempted) << read_text(out);
  EXPECT_THAT(*preempted, HasSubstr("checkpointing train within 1m; stopping every program "
                                    "within 1m30s, then requeue the job and exit 138"));
  auto saved = line_with(out, "checkpoint saved (asked by recycler)", scaled(10s));
  ASSERT_TRUE(saved) << read_text(out);
  ASSERT_TRUE(line_with(out, "train[0] checkpointed before its stop", scaled(10s)));
  ASSERT_TRUE(line_with(out, "preempt: requeued Slurm job " + job, scaled(20s))) << read_text(out);
  auto requeued = std::chrono::steady_clock::now();

  // The next run of the same job: recycler again, the trainer resumes.
  auto resumed = line_with(out, "resumed from checkpoint", scaled(60s));
  ASSERT_TRUE(resumed) << read_text(out) << read_text(cluster_.dir() + "/slurmctld.log");
  auto resumed_at = std::chrono::steady_clock::now();
  EXPECT_THAT(*resumed,
              HasSubstr("(recycled for: the Slurm job was requeued (SLURM_RESTART_COUNT=1))"));
  EXPECT_EQ(global_step(*resumed), global_step(*saved)) << "no step lost or redone";
  ASSERT_TRUE(line_with(out, "training done: epoch 4/4", scaled(60s))) << read_text(out);
  std::string state;
  EXPECT_TRUE(eventually(
      [&] {
        state = run({"scontrol", "show", "job", job}).out;
        return state.find("JobState=COMPLETED") != std::string::npos;
      },
      scaled(30s)))
      << state;
  EXPECT_THAT(state, HasSubstr("Restarts=1"));
  EXPECT_EQ(read_text(out).find("starting from scratch", read_text(out).find("requeued")),
            std::string::npos)
      << "the second run started from scratch:\n"
      << read_text(out);
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  // For the record (examples/slurm/README.md): the signal to the requeue is
  // recycler's (a checkpoint at the trainer's next step, the stop); the
  // requeue to the resume is Slurm's (sched_interval=2 here) and the start.
  std::cout << "figures: USR1 to requeued " << ms(requeued - signalled)
            << " ms; requeued to resumed " << ms(resumed_at - requeued) << " ms\n";
}

}  // namespace
}  // namespace recycler::testing
