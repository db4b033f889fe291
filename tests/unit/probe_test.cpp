// Memory probes: the pure parsers on inline text, the readers on fixture
// cgroup and /proc trees (tests/fixtures/probe), opened the way the supervisor
// opens them, and one real read of this test process through /proc.
#include "supervisor/probe/probe.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <limits>
#include <string>
#include <thread>

#include "supervisor/probe/parse.h"
#include "supervisor/util/fd.h"

namespace recycler::probe {
namespace {

using policies::kNeedsCgroupMemory;
using policies::kNeedsCpu;
using policies::kNeedsProcesses;
using policies::kNeedsProcessMemory;
using policies::kNeedsThreads;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

std::string fixture(const std::string& name) {
  return std::string(RECYCLER_FIXTURES_DIR) + "/probe/" + name;
}

// The cgroup directory as the supervisor holds it: an O_PATH directory fd.
UniqueFd open_dir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(fd) << path;
  return fd;
}

uint64_t page_size() {
  return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// ---- parse_u64 ----

TEST(ParseU64, AcceptsTrailingNewline) {
  EXPECT_EQ(parse_u64("38522880\n"), 38522880u);
  EXPECT_EQ(parse_u64("0"), 0u);
}

TEST(ParseU64, MaxIsEmpty) {
  EXPECT_EQ(parse_u64("max\n"), std::nullopt);
}

TEST(ParseU64, RejectsEmptyNegativeAndTrailingGarbage) {
  EXPECT_EQ(parse_u64(""), std::nullopt);
  EXPECT_EQ(parse_u64("\n"), std::nullopt);
  EXPECT_EQ(parse_u64("-1"), std::nullopt);
  EXPECT_EQ(parse_u64("12 kB"), std::nullopt);
  EXPECT_EQ(parse_u64("12x"), std::nullopt);
}

TEST(ParseU64, ReadsLargestValueAndRejectsOverflow) {
  EXPECT_EQ(parse_u64("18446744073709551615\n"), kMax);
  EXPECT_EQ(parse_u64("18446744073709551616\n"), std::nullopt);
}

// ---- parse_memory_stat ----

TEST(ParseMemoryStat, V1MapsHierarchicalTotals) {
  CgroupMemory m;
  parse_memory_stat(
      "cache 100\nrss 200\nshmem 30\nmapped_file 7\n"
      "total_cache 1000\ntotal_rss 2000\ntotal_shmem 300\n",
      false, m);
  EXPECT_EQ(m.anon, 2000u);
  EXPECT_EQ(m.file, 1000u);
  EXPECT_EQ(m.shmem, 300u);
  EXPECT_EQ(m.kernel, std::nullopt);
}

TEST(ParseMemoryStat, V1FallsBackToOwnFiguresWithoutTotals) {
  CgroupMemory m;
  parse_memory_stat("cache 100\nrss 200\nshmem 30\n", false, m);
  EXPECT_EQ(m.anon, 200u);
  EXPECT_EQ(m.file, 100u);
  EXPECT_EQ(m.shmem, 30u);
}

TEST(ParseMemoryStat, V2KernelLineWinsOverItsParts) {
  CgroupMemory m;
  parse_memory_stat(
      "anon 10\nfile 20\nkernel 500\nkernel_stack 1\npagetables 2\npercpu 3\nsock 4\n"
      "shmem 5\nslab 6\n",
      true, m);
  EXPECT_EQ(m.anon, 10u);
  EXPECT_EQ(m.file, 20u);
  EXPECT_EQ(m.shmem, 5u);
  EXPECT_EQ(m.kernel, 500u);
}

TEST(ParseMemoryStat, V2WithoutKernelLineSumsPartsUsingSlab) {
  CgroupMemory m;
  parse_memory_stat(
      "anon 10\nkernel_stack 1\npagetables 2\npercpu 4\nsock 8\n"
      "slab_reclaimable 16\nslab_unreclaimable 32\nslab 48\n",
      true, m);
  EXPECT_EQ(m.kernel, 1u + 2 + 4 + 8 + 48);
}

TEST(ParseMemoryStat, V2WithoutSlabLineSumsSlabHalves) {
  CgroupMemory m;  // 5.4-era: no pagetables, no slab total
  parse_memory_stat(
      "anon 10\nkernel_stack 1\npercpu 4\nslab_reclaimable 16\nslab_unreclaimable 32\n", true, m);
  EXPECT_EQ(m.kernel, 1u + 4 + 16 + 32);
}

TEST(ParseMemoryStat, V2WithNoKernelFigureAtAllLeavesKernelEmpty) {
  CgroupMemory m;
  parse_memory_stat("anon 10\nfile 20\n", true, m);
  EXPECT_EQ(m.anon, 10u);
  EXPECT_EQ(m.kernel, std::nullopt);
}

TEST(ParseMemoryStat, V2IgnoresV1KeysAndViceVersa) {
  CgroupMemory v2;
  parse_memory_stat("rss 1\ncache 2\ntotal_rss 3\n", true, v2);
  EXPECT_EQ(v2.anon, std::nullopt);
  EXPECT_EQ(v2.file, std::nullopt);
  CgroupMemory v1;
  parse_memory_stat("anon 1\nfile 2\nkernel 3\n", false, v1);
  EXPECT_EQ(v1.anon, std::nullopt);
  EXPECT_EQ(v1.file, std::nullopt);
  EXPECT_EQ(v1.kernel, std::nullopt);
}

TEST(ParseMemoryStat, SkipsMalformedLines) {
  CgroupMemory m;
  parse_memory_stat(
      "anon\nanon x12\nfile 12 kB\nshmem -3\n\n   \nanon 40\nfile\t7\nkernel 99999999999999999999\n"
      "shmem 6",
      true, m);
  EXPECT_EQ(m.anon, 40u);
  EXPECT_EQ(m.file, std::nullopt);  // neither "12 kB" nor a tab separator is memory.stat
  EXPECT_EQ(m.shmem, 6u);           // the last line needs no newline
  EXPECT_EQ(m.kernel, std::nullopt);
}

TEST(ParseMemoryStat, EmptyInputLeavesFieldsEmpty) {
  CgroupMemory m;
  parse_memory_stat("", true, m);
  EXPECT_EQ(m.anon, std::nullopt);
  EXPECT_EQ(m.file, std::nullopt);
  EXPECT_EQ(m.kernel, std::nullopt);
  EXPECT_EQ(m.shmem, std::nullopt);
}

TEST(ParseMemoryStat, ReadsHugeValues) {
  CgroupMemory m;
  parse_memory_stat("total_rss 18446744073709551615\ntotal_cache 9223372036854771712\n", false, m);
  EXPECT_EQ(m.anon, kMax);
  EXPECT_EQ(m.file, 9223372036854771712u);
}

TEST(ParseMemoryStat, LeavesCurrentAndPressureAlone) {
  CgroupMemory m;
  m.current = 7;
  m.pressure = 1.5;
  parse_memory_stat("anon 1\n", true, m);
  EXPECT_EQ(m.current, 7u);
  EXPECT_EQ(m.pressure, 1.5);
}

// ---- parse_pressure_some_avg10 ----

TEST(ParsePressure, ReadsSomeAvg10) {
  EXPECT_EQ(parse_pressure_some_avg10("some avg10=0.31 avg60=0.12 avg300=0.03 total=1234567\n"
                                      "full avg10=9.00 avg60=0.05 avg300=0.01 total=456789\n"),
            0.31);
}

TEST(ParsePressure, FindsSomeAfterOtherLines) {
  EXPECT_EQ(parse_pressure_some_avg10("full avg10=9.00 avg60=0 avg300=0 total=0\n"
                                      "some avg10=12.50 avg60=0 avg300=0 total=0\n"),
            12.5);
}

TEST(ParsePressure, MalformedOrMissingIsEmpty) {
  EXPECT_EQ(parse_pressure_some_avg10(""), std::nullopt);
  EXPECT_EQ(parse_pressure_some_avg10("full avg10=1.00 avg60=0 avg300=0 total=0\n"), std::nullopt);
  EXPECT_EQ(parse_pressure_some_avg10("some avg10= avg60=0.12\n"), std::nullopt);
  EXPECT_EQ(parse_pressure_some_avg10("some avg10=abc avg60=0.12\n"), std::nullopt);
  EXPECT_EQ(parse_pressure_some_avg10("some avg60=0.12 total=5\n"), std::nullopt);
}

// ---- parse_cpu_stat_usage_usec ----

TEST(ParseCpuStat, ReadsUsageUsecWhereverItIs) {
  EXPECT_EQ(parse_cpu_stat_usage_usec("usage_usec 8123456\nuser_usec 6000000\n"), 8123456u);
  EXPECT_EQ(parse_cpu_stat_usage_usec("nr_periods 0\nusage_usec 42"), 42u);
}

TEST(ParseCpuStat, MissingOrMalformedIsEmpty) {
  EXPECT_EQ(parse_cpu_stat_usage_usec(""), std::nullopt);
  EXPECT_EQ(parse_cpu_stat_usage_usec("user_usec 6000000\nsystem_usec 1\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_stat_usage_usec("usage_usec\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_stat_usage_usec("usage_usec 12x\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_stat_usage_usec("usage_usec_total 5\n"), std::nullopt);
}

// ---- parse_smaps_rollup ----

TEST(ParseSmapsRollup, ConvertsKilobytesAndSumsPrivateForUss) {
  ProcessMemory m = parse_smaps_rollup(
      "55d1c2a3e000-7ffc8b9f2000 ---p 00000000 00:00 0                          [rollup]\n"
      "Rss:                 100 kB\n"
      "Pss:                  60 kB\n"
      "Shared_Clean:         30 kB\n"
      "Private_Clean:        10 kB\n"
      "Private_Dirty:        50 kB\n"
      "Anonymous:            55 kB\n"
      "Private_Hugetlb:    2048 kB\n");
  EXPECT_EQ(m.rss, 100 * kKiB);
  EXPECT_EQ(m.pss, 60 * kKiB);
  EXPECT_EQ(m.uss, (10 + 50 + 2048) * kKiB);
  EXPECT_EQ(m.anon, 55 * kKiB);
}

TEST(ParseSmapsRollup, NoPrivateLinesLeavesUssEmpty) {
  ProcessMemory m = parse_smaps_rollup("Rss: 100 kB\nPrivate_Hugetlb: 0 kB\n");
  EXPECT_EQ(m.rss, 100 * kKiB);
  EXPECT_EQ(m.uss, std::nullopt);
  EXPECT_EQ(m.pss, std::nullopt);
  EXPECT_EQ(m.anon, std::nullopt);
}

TEST(ParseSmapsRollup, SkipsMalformedValues) {
  ProcessMemory m = parse_smaps_rollup(
      "Rss: 100\nPss: x kB\nAnonymous: 12 MB\nPrivate_Dirty: 18014398509481984 kB\n"
      "Private_Clean: 4 kB\n");
  EXPECT_EQ(m.rss, std::nullopt);   // no unit
  EXPECT_EQ(m.pss, std::nullopt);   // no number
  EXPECT_EQ(m.anon, std::nullopt);  // not kB
  EXPECT_EQ(m.uss, 4 * kKiB);       // Private_Dirty overflows 64 bits in bytes: skipped
}

TEST(ParseSmapsRollup, EmptyInputIsEmpty) {
  ProcessMemory m = parse_smaps_rollup("");
  EXPECT_EQ(m.rss, std::nullopt);
  EXPECT_EQ(m.uss, std::nullopt);
}

// ---- parse_status_memory ----

TEST(ParseStatusMemory, ReadsVmRssAndRssAnonInBytes) {
  StatusMemory m = parse_status_memory(
      "Name:\tgunicorn\nVmHWM:\t  530432 kB\nVmRSS:\t  512008 kB\nRssAnon:\t  497672 kB\n"
      "RssFile:\t   14336 kB\nRssShmem:\t       0 kB\nThreads:\t7\n");
  EXPECT_EQ(m.rss, 512008 * kKiB);
  EXPECT_EQ(m.anon, 497672 * kKiB);
}

TEST(ParseStatusMemory, SkipsMalformedValues) {
  StatusMemory m = parse_status_memory(
      "VmRSS:\t12\nRssAnon:\tx kB\nVmRSS 40 kB\nVmRSS:\t18014398509481984 kB\n"
      "RssAnon:\t8 kB\n");
  EXPECT_EQ(m.rss, std::nullopt);  // no unit, no colon, overflow in bytes
  EXPECT_EQ(m.anon, 8 * kKiB);     // the valid line after the bad one
}

TEST(ParseStatusMemory, OldKernelWithoutRssAnonLeavesAnonEmpty) {
  // Before 4.5 status has VmRSS but no RssAnon/RssFile/RssShmem.
  StatusMemory m =
      parse_status_memory("VmHWM:\t    6000 kB\nVmRSS:\t    6000 kB\nVmData:\t3964 kB\n");
  EXPECT_EQ(m.rss, 6000 * kKiB);
  EXPECT_EQ(m.anon, std::nullopt);
}

TEST(ParseStatusMemory, NoMmLeavesBothEmpty) {
  // Kernel threads and zombies have no Vm* or Rss* lines.
  StatusMemory m = parse_status_memory("Name:\tkworker/0:1\nState:\tI (idle)\nThreads:\t1\n");
  EXPECT_EQ(m.rss, std::nullopt);
  EXPECT_EQ(m.anon, std::nullopt);
  EXPECT_EQ(parse_status_memory("").rss, std::nullopt);
}

// ---- parse_statm_rss, parse_stat_threads ----

TEST(ParseStatmRss, MultipliesResidentPagesByPageSize) {
  EXPECT_EQ(parse_statm_rss("24880 1500 768 704 0 1024 0\n", 4096), 1500u * 4096);
  EXPECT_EQ(parse_statm_rss("24880 1500 768 704 0 1024 0\n", 65536), 1500u * 65536);
}

TEST(ParseStatmRss, MalformedIsEmpty) {
  EXPECT_EQ(parse_statm_rss("", 4096), std::nullopt);
  EXPECT_EQ(parse_statm_rss("24880\n", 4096), std::nullopt);
  EXPECT_EQ(parse_statm_rss("24880 x 1\n", 4096), std::nullopt);
  EXPECT_EQ(parse_statm_rss("1 18446744073709551615 1\n", 4096), std::nullopt);
}

TEST(ParseStatThreads, CountsFieldsFromTheLastParenthesis) {
  EXPECT_EQ(parse_stat_threads("4242 (my (weird) name) S 1 4242 4242 0 -1 4194560 125310 0 12 0 "
                               "1503 211 0 0 20 0 7 0 675810 6094602240 128000\n"),
            7u);
  EXPECT_EQ(parse_stat_threads("77 (a) b) c 9) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 "
                               "123 0 0\n"),
            123u);
}

TEST(ParseStat, ReadsStateParentSessionStartTimeAndCosts) {
  auto st = parse_stat(
      "4242 (my (weird) name) S 17 4242 4240 0 -1 4194560 125310 0 12 0 "
      "1503 211 0 0 20 0 7 0 675810 6094602240 128000\n");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 17u);
  EXPECT_EQ(st->session, 4240u);
  EXPECT_EQ(st->flags, 4194560u);
  EXPECT_FALSE(st->exiting());
  EXPECT_EQ(st->starttime, 675810u);
  EXPECT_EQ(st->utime, 1503u);
  EXPECT_EQ(st->stime, 211u);
  EXPECT_EQ(st->vsize, 6094602240u);
  EXPECT_EQ(st->rss_pages, 128000u);
  auto dying = parse_stat("7 (x) R 1 7 7 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n");
  ASSERT_TRUE(dying);
  EXPECT_TRUE(dying->exiting()) << "PF_EXITING";
}

TEST(ParseStat, TruncatedOrMalformedIsEmpty) {
  EXPECT_EQ(parse_stat(""), std::nullopt);
  EXPECT_EQ(parse_stat("4242 noparens S 1 2 3"), std::nullopt);
  EXPECT_EQ(parse_stat("4242 (x) S 1 4242 4242 0 -1 4194560"), std::nullopt);
  EXPECT_EQ(parse_stat("4242 (x) S -1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"),
            std::nullopt);
}

TEST(ParseStatThreads, TruncatedOrMalformedIsEmpty) {
  EXPECT_EQ(parse_stat_threads(""), std::nullopt);
  EXPECT_EQ(parse_stat_threads("4242 noparens S 1 2 3"), std::nullopt);
  EXPECT_EQ(parse_stat_threads("4242 (x) S 1 4242 4242 0 -1 4194560"), std::nullopt);
  EXPECT_EQ(parse_stat_threads("4242 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 -2 0"),
            std::nullopt);
  EXPECT_EQ(parse_stat_threads("4242 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 4294967296 0"),
            std::nullopt);
}

// ---- CgroupReader on fixture trees ----

TEST(CgroupReader, V1ReadsUsageAndMapsStat) {
  UniqueFd dir = open_dir(fixture("v1"));
  CgroupMemory m = CgroupReader(dir.get(), false).read(true);
  EXPECT_EQ(m.current, 38522880u);
  EXPECT_EQ(m.anon, 27271168u);
  EXPECT_EQ(m.file, 10657792u);
  EXPECT_EQ(m.shmem, 2097152u);
  EXPECT_EQ(m.kernel, std::nullopt);
  EXPECT_EQ(m.pressure, std::nullopt);  // v1 has no PSI file
}

TEST(CgroupReader, V2ReadsCurrentStatAndPressure) {
  UniqueFd dir = open_dir(fixture("v2"));
  CgroupMemory m = CgroupReader(dir.get(), true).read(true);
  EXPECT_EQ(m.current, 1739325440u);
  EXPECT_EQ(m.anon, 1288437760u);
  EXPECT_EQ(m.file, 402653184u);
  EXPECT_EQ(m.kernel, 48234496u);
  EXPECT_EQ(m.shmem, 2097152u);
  EXPECT_EQ(m.pressure, 0.31);
}

TEST(CgroupReader, V2ReadsCpuUsageFromCpuStat) {
  UniqueFd dir = open_dir(fixture("v2"));
  CgroupReader reader(dir.get(), true);
  EXPECT_TRUE(reader.has_cpu_usage());
  EXPECT_EQ(reader.cpu_usec(), 8123456u);
}

TEST(CgroupReader, V1HasNoCpuUsageOfItsOwn) {
  UniqueFd dir = open_dir(fixture("v1"));
  CgroupReader reader(dir.get(), false);
  EXPECT_FALSE(reader.has_cpu_usage()) << "cpuacct is a hierarchy recycler does not use";
  EXPECT_EQ(reader.cpu_usec(), std::nullopt);
}

TEST(CgroupReader, V2SkipsPressureUnlessAsked) {
  UniqueFd dir = open_dir(fixture("v2"));
  CgroupMemory m = CgroupReader(dir.get(), true).read(false);
  EXPECT_EQ(m.current, 1739325440u);
  EXPECT_EQ(m.pressure, std::nullopt);
}

TEST(CgroupReader, V2OldKernelSumsKernelPartsAndToleratesMissingPressure) {
  UniqueFd dir = open_dir(fixture("v2-old-kernel"));
  CgroupMemory m = CgroupReader(dir.get(), true).read(true);
  EXPECT_EQ(m.current, 915013632u);
  EXPECT_EQ(m.anon, 845807616u);
  // kernel_stack + pagetables + percpu + sock + slab
  EXPECT_EQ(m.kernel, 655360u + 3145728 + 524288 + 65536 + 22872064);
  EXPECT_EQ(m.pressure, std::nullopt);
}

TEST(CgroupReader, DirectoryWithoutFilesLeavesEverythingEmpty) {
  UniqueFd dir = open_dir(fixture("proc"));
  CgroupMemory m = CgroupReader(dir.get(), true).read(true);
  EXPECT_EQ(m.current, std::nullopt);
  EXPECT_EQ(m.anon, std::nullopt);
  EXPECT_EQ(m.pressure, std::nullopt);
}

TEST(CgroupReader, OversizedFileIsCutAtItsLastWholeLine) {
  char tmpl[] = "/tmp/recycler-probe-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  // Past the reader's 8 KiB buffer, with "anon 123456789" straddling its end:
  // a number cut in half ("anon 12") must not be read.
  const size_t cut = 8192 - 7;  // where "anon " begins
  std::string stat = "file 5\nunknown_key ";
  stat += std::string(cut - stat.size() - 1, '0') + "\nanon 123456789\n";
  ASSERT_EQ(stat.find("anon"), cut);
  {
    UniqueFd f(::open((dir + "/memory.stat").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(f);
    ASSERT_EQ(::write(f.get(), stat.data(), stat.size()), static_cast<ssize_t>(stat.size()));
  }
  UniqueFd fd = open_dir(dir);
  CgroupMemory m = CgroupReader(fd.get(), true).read(false);
  ::unlink((dir + "/memory.stat").c_str());
  ::rmdir(dir.c_str());
  EXPECT_EQ(m.file, 5u);
  EXPECT_EQ(m.anon, std::nullopt);
}

// ---- MemoryFiles: the files held open between samples ----

TEST(MemoryFiles, ReadsTheSameFiguresAsAnOpenPerRead) {
  UniqueFd dir = open_dir(fixture("v2"));
  CgroupMemory direct = CgroupReader(dir.get(), true).read(true);
  MemoryFiles held(dir.get(), true);
  EXPECT_EQ(MemoryFiles::of(dir.get()), &held);
  for (int i = 0; i < 2; ++i) {  // the second time through the files held
    CgroupMemory m = CgroupReader(dir.get(), true).read(true);
    EXPECT_EQ(m.current, direct.current);
    EXPECT_EQ(m.anon, direct.anon);
    EXPECT_EQ(m.file, direct.file);
    EXPECT_EQ(m.kernel, direct.kernel);
    EXPECT_EQ(m.shmem, direct.shmem);
    EXPECT_EQ(m.pressure, direct.pressure);
  }
}

TEST(MemoryFiles, EachReadSeesTheFileAnewAndUnregistersWhenGone) {
  char tmpl[] = "/tmp/recycler-probe-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string current = dir + "/memory.usage_in_bytes";
  // In place, as the kernel's counters change: the same file, new contents.
  auto write = [&](const std::string& text) {
    UniqueFd f(::open(current.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(f);
    ASSERT_EQ(::write(f.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  };
  write("1000\n");
  UniqueFd fd = open_dir(dir);
  {
    MemoryFiles held(fd.get(), false);
    EXPECT_EQ(CgroupReader(fd.get(), false).read(false).current, 1000u);
    write("2000000\n");
    EXPECT_EQ(CgroupReader(fd.get(), false).read(false).current, 2000000u);
    held.close();
    write("3\n");
    EXPECT_EQ(CgroupReader(fd.get(), false).read(false).current, 3u);
  }
  EXPECT_EQ(MemoryFiles::of(fd.get()), nullptr);
  write("4\n");
  EXPECT_EQ(CgroupReader(fd.get(), false).read(false).current, 4u);
  ::unlink(current.c_str());
  ::rmdir(dir.c_str());
}

// ---- ProcessReader on a fixture /proc ----

TEST(ProcessReader, FullReadsSmapsRollup) {
  ProcessMemory m = ProcessReader(fixture("proc")).memory(4242, true);
  EXPECT_EQ(m.rss, 512000 * kKiB);
  EXPECT_EQ(m.pss, 500736 * kKiB);
  EXPECT_EQ(m.uss, (4096 + 495616) * kKiB);
  EXPECT_EQ(m.anon, 497664 * kKiB);
}

TEST(ProcessReader, NotFullReadsStatmOnly) {
  ProcessMemory m = ProcessReader(fixture("proc")).memory(4242, false);
  EXPECT_EQ(m.rss, 128002 * page_size());
  EXPECT_EQ(m.pss, std::nullopt);
  EXPECT_EQ(m.uss, std::nullopt);
  EXPECT_EQ(m.anon, std::nullopt);
}

TEST(ProcessReader, FullFallsBackToStatmWithoutSmapsRollup) {
  ProcessMemory m = ProcessReader(fixture("proc")).memory(4343, true);
  EXPECT_EQ(m.rss, 1500 * page_size());
  EXPECT_EQ(m.uss, std::nullopt);
}

TEST(ProcessReader, StatusMemoryReadsTheKernelCounters) {
  // The counters lag the page walk of smaps_rollup (Rss 512000, Anonymous
  // 497664 kB) by a few pages: the fixture's figures tell the files apart.
  StatusMemory m = ProcessReader(fixture("proc")).status_memory(4242);
  EXPECT_EQ(m.rss, 512008 * kKiB);
  EXPECT_EQ(m.anon, 497672 * kKiB);
}

TEST(ProcessReader, StatusMemoryOfOldKernelHasNoAnon) {
  StatusMemory m = ProcessReader(fixture("proc")).status_memory(4343);
  EXPECT_EQ(m.rss, 6000 * kKiB);
  EXPECT_EQ(m.anon, std::nullopt);
}

TEST(ProcessReader, ThreadsFromStatWithWeirdComm) {
  ProcessReader procs(fixture("proc"));
  EXPECT_EQ(procs.threads(4242), 7u);
  EXPECT_EQ(procs.threads(4343), std::nullopt);  // no stat file
}

TEST(ProcessReader, ExitedProcessYieldsEmptyFields) {
  ProcessReader procs(fixture("proc"));
  ProcessMemory m = procs.memory(5555, true);
  EXPECT_EQ(m.rss, std::nullopt);
  EXPECT_EQ(m.uss, std::nullopt);
  EXPECT_EQ(procs.status_memory(5555).rss, std::nullopt);
  EXPECT_EQ(procs.threads(5555), std::nullopt);
}

TEST(ProcessReader, CpuTimeIsUtimePlusStime) {
  ProcessReader procs(fixture("proc"));
  uint64_t ticks = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  EXPECT_EQ(procs.cpu_usec(4242), (1503 + 211) * 1'000'000 / ticks);
  EXPECT_EQ(procs.cpu_usec(4343), std::nullopt);  // no stat file
  EXPECT_EQ(procs.cpu_usec(5555), std::nullopt);  // gone
}

TEST(ProcessReader, CpuTimeOfThisProcessGrowsAsItWorks) {
  ProcessReader procs;
  auto before = procs.cpu_usec(::getpid());
  ASSERT_TRUE(before);
  // Busy until the kernel has charged a tick more, bounded by a deadline.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::optional<uint64_t> after;
  volatile uint64_t spin = 0;
  do {
    for (int i = 0; i < 1'000'000; ++i) spin = spin + 1;
    after = procs.cpu_usec(::getpid());
  } while (after && *after == *before && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(after);
  EXPECT_GT(*after, *before);
}

TEST(ProcessReader, MissingProcRootYieldsEmptyFields) {
  ProcessReader procs(fixture("no-such-dir"));
  EXPECT_EQ(procs.memory(4242, true).rss, std::nullopt);
  EXPECT_EQ(procs.threads(4242), std::nullopt);
}

// ---- probe_worker ----

class ProbeWorker : public ::testing::Test {
 protected:
  UniqueFd dir_ = open_dir(fixture("v2"));
  CgroupReader cgroup_{dir_.get(), true};
  ProcessReader procs_{fixture("proc")};
  std::vector<pid_t> pids_{4242, 4343};
  policies::TimePoint now_ = policies::TimePoint(std::chrono::seconds(1000));
};

TEST_F(ProbeWorker, CgroupMemoryAloneReadsNoProcesses) {
  policies::Sample s = probe_worker(&cgroup_, procs_, pids_, 4242, kNeedsCgroupMemory, now_);
  EXPECT_EQ(s.t, now_);
  EXPECT_EQ(s.current, 1739325440u);
  EXPECT_EQ(s.anon, 1288437760u);
  EXPECT_EQ(s.file, 402653184u);
  EXPECT_EQ(s.kernel, 48234496u);
  EXPECT_EQ(s.shmem, 2097152u);
  EXPECT_EQ(s.pressure, 0.31);
  EXPECT_TRUE(s.processes.empty());
  EXPECT_EQ(s.threads, std::nullopt);
}

TEST_F(ProbeWorker, ProcessMemoryFillsEachProcessAndMarksMain) {
  policies::Sample s = probe_worker(&cgroup_, procs_, pids_, 4242, kNeedsProcessMemory, now_);
  EXPECT_EQ(s.current, std::nullopt);  // nobody asked for the cgroup
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[0].pid, 4242);
  EXPECT_TRUE(s.processes[0].main);
  EXPECT_EQ(s.processes[0].uss, (4096 + 495616) * kKiB);
  EXPECT_EQ(s.processes[0].pss, 500736 * kKiB);
  EXPECT_EQ(s.processes[0].threads, std::nullopt);
  EXPECT_EQ(s.processes[1].pid, 4343);
  EXPECT_FALSE(s.processes[1].main);
  EXPECT_EQ(s.processes[1].rss, 1500 * page_size());  // statm fallback
  EXPECT_EQ(s.threads, std::nullopt);
}

TEST_F(ProbeWorker, ThreadsAreSummedOverProcessesThatReportThem) {
  policies::Sample s = probe_worker(&cgroup_, procs_, pids_, 4242, kNeedsThreads, now_);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[0].threads, 7u);
  EXPECT_EQ(s.processes[1].threads, std::nullopt);
  EXPECT_EQ(s.processes[0].rss, std::nullopt);  // memory was not asked for
  EXPECT_EQ(s.threads, 7u);
}

TEST_F(ProbeWorker, ProcessListAloneReadsNothingPerProcess) {
  policies::Sample s = probe_worker(&cgroup_, procs_, pids_, 4343, kNeedsProcesses, now_);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_FALSE(s.processes[0].main);
  EXPECT_TRUE(s.processes[1].main);
  EXPECT_EQ(s.processes[0].rss, std::nullopt);
  EXPECT_EQ(s.processes[0].threads, std::nullopt);
  EXPECT_EQ(s.current, std::nullopt);
}

TEST_F(ProbeWorker, ExitedProcessStaysListedWithEmptyFields) {
  policies::Sample s =
      probe_worker(&cgroup_, procs_, {4242, 5555}, 4242, kNeedsProcessMemory | kNeedsThreads, now_);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[1].pid, 5555);
  EXPECT_EQ(s.processes[1].rss, std::nullopt);
  EXPECT_EQ(s.processes[1].threads, std::nullopt);
  EXPECT_EQ(s.threads, 7u);
}

TEST_F(ProbeWorker, WithoutCgroupSumsStatusOfTheProcessTree) {
  policies::Sample s = probe_worker(nullptr, procs_, {4242, 5555}, 4242, kNeedsCgroupMemory, now_);
  EXPECT_EQ(s.current, 512008 * kKiB);  // status's VmRSS and RssAnon, not smaps_rollup's
  EXPECT_EQ(s.anon, 497672 * kKiB);     // 5555 has exited: it adds nothing
  EXPECT_EQ(s.file, std::nullopt);
  EXPECT_EQ(s.kernel, std::nullopt);
  EXPECT_EQ(s.shmem, std::nullopt);
  EXPECT_EQ(s.pressure, std::nullopt);
  EXPECT_TRUE(s.processes.empty());  // the list was not asked for
}

TEST_F(ProbeWorker, CpuComesFromCpuStatOnV2WithoutReadingProcesses) {
  EXPECT_FALSE(reads_processes(kNeedsCpu, &cgroup_));
  policies::Sample s = probe_worker(&cgroup_, procs_, pids_, 4242, kNeedsCpu, now_);
  EXPECT_EQ(s.cpu_usec, 8123456u);
  EXPECT_EQ(s.current, std::nullopt);
  EXPECT_TRUE(s.processes.empty());
}

TEST_F(ProbeWorker, CpuIsSummedOverTheProcessesOnV1AndWithoutCgroup) {
  UniqueFd v1_dir = open_dir(fixture("v1"));
  CgroupReader v1(v1_dir.get(), false);
  uint64_t ticks = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  for (const CgroupReader* cgroup : std::initializer_list<const CgroupReader*>{&v1, nullptr}) {
    EXPECT_TRUE(reads_processes(kNeedsCpu, cgroup));
    // 4343 has no stat file and 5555 is gone: they add nothing.
    policies::Sample s = probe_worker(cgroup, procs_, {4242, 4343, 5555}, 4242, kNeedsCpu, now_);
    EXPECT_EQ(s.cpu_usec, (1503 + 211) * 1'000'000 / ticks);
    EXPECT_TRUE(s.processes.empty()) << "the list was not asked for";
  }
  policies::Sample none = probe_worker(nullptr, procs_, {5555}, 5555, kNeedsCpu, now_);
  EXPECT_EQ(none.cpu_usec, std::nullopt) << "no process read: unknown, not 0";
}

TEST_F(ProbeWorker, CpuIsNotReadUnlessAsked) {
  policies::Sample s = probe_worker(&cgroup_, procs_, pids_, 4242, kNeedsCgroupMemory, now_);
  EXPECT_EQ(s.cpu_usec, std::nullopt);
  policies::Sample t = probe_worker(nullptr, procs_, pids_, 4242, kNeedsThreads, now_);
  EXPECT_EQ(t.cpu_usec, std::nullopt);
}

TEST_F(ProbeWorker, WithoutCgroupAnonIsEmptyWhenAProcessLacksRssAnon) {
  policies::Sample s = probe_worker(nullptr, procs_, pids_, 4242, kNeedsCgroupMemory, now_);
  EXPECT_EQ(s.current, (512008 + 6000) * kKiB);
  EXPECT_EQ(s.anon, std::nullopt);
}

TEST_F(ProbeWorker, WithoutCgroupAndWithThreadsSumsStatusAndFillsNoProcessMemory) {
  policies::Sample s =
      probe_worker(nullptr, procs_, {4242}, 4242, kNeedsCgroupMemory | kNeedsThreads, now_);
  EXPECT_EQ(s.current, 512008 * kKiB);
  EXPECT_EQ(s.anon, 497672 * kKiB);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].threads, 7u);
  EXPECT_EQ(s.processes[0].rss, std::nullopt);  // per-process memory was not asked for
}

TEST_F(ProbeWorker, WithoutCgroupAndWithProcessMemorySumsSmapsRollup) {
  policies::Sample s =
      probe_worker(nullptr, procs_, {4242}, 4242, kNeedsCgroupMemory | kNeedsProcessMemory, now_);
  EXPECT_EQ(s.current, 512000 * kKiB);  // smaps_rollup's Rss and Anonymous, read anyway
  EXPECT_EQ(s.anon, 497664 * kKiB);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].uss, (4096 + 495616) * kKiB);
}

TEST_F(ProbeWorker, WithoutCgroupAndWithProcessMemoryAnonIsEmptyWhenSmapsRollupIsMissing) {
  policies::Sample s =
      probe_worker(nullptr, procs_, pids_, 4242, kNeedsCgroupMemory | kNeedsProcessMemory, now_);
  EXPECT_EQ(s.current, 512000 * kKiB + 1500 * page_size());  // 4343: statm fallback
  EXPECT_EQ(s.anon, std::nullopt);
}

// ---- the real /proc ----

TEST(RealProc, ReadsOwnMemory) {
  ProcessReader procs;
  ProcessMemory full = procs.memory(::getpid(), true);
  ASSERT_TRUE(full.rss);
  EXPECT_GT(*full.rss, 0u);
  ASSERT_TRUE(full.uss);
  EXPECT_LE(*full.uss, *full.rss);
  ProcessMemory statm = procs.memory(::getpid(), false);
  ASSERT_TRUE(statm.rss);
  EXPECT_GT(*statm.rss, 0u);
}

TEST(RealProc, ReadsOwnStatusMemory) {
  StatusMemory m = ProcessReader().status_memory(::getpid());
  ASSERT_TRUE(m.rss);
  ASSERT_TRUE(m.anon);
  EXPECT_GT(*m.anon, 0u);
  EXPECT_LE(*m.anon, *m.rss);
}

TEST(RealProc, CountsOwnThreads) {
  ProcessReader procs;
  std::optional<uint32_t> before = procs.threads(::getpid());
  ASSERT_TRUE(before);
  EXPECT_GE(*before, 1u);
  std::promise<void> release;
  std::thread extra([f = release.get_future()]() mutable { f.wait(); });
  std::optional<uint32_t> during = procs.threads(::getpid());
  release.set_value();
  extra.join();
  ASSERT_TRUE(during);
  EXPECT_EQ(*during, *before + 1);
}

}  // namespace
}  // namespace recycler::probe
