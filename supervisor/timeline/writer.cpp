#include "supervisor/timeline/writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string_view>
#include <utility>
#include <vector>

#include "supervisor/timeline/trace.h"
#include "supervisor/util/safe_dir.h"

namespace recycler::timeline {
namespace {

std::string dir_of(const std::string& path) {
  return path.substr(0, path.rfind('/'));
}

// The longest samples row is about 220 bytes: reserved once per writer.
constexpr size_t kRowCapacity = 512;

// recycler may run as root in a directory other users can reach: the
// directory is created owner-only and checked (util/safe_dir.h), its files are
// opened through its fd and never through a symlink.
constexpr mode_t kDirMode = 0750;
constexpr mode_t kFileMode = 0640;

}  // namespace

TimelineWriter::File::File(int dirfd, std::string dir, std::string name, std::string_view header,
                           const config::TimelineConfig& config)
    : dirfd_(dirfd),
      name_(std::move(name)),
      path_(std::move(dir) + "/" + name_),
      header_(header),
      max_size_(config.max_size),
      keep_(config.keep) {}

Status TimelineWriter::File::open() {
  return reopen(0);
}

Status TimelineWriter::File::reopen(int extra_flags) {
  auto opened =
      open_private_file(dirfd_, name_, O_WRONLY | O_CREAT | O_APPEND | extra_flags, kFileMode);
  if (!opened) return Error{dir_of(path_) + "/" + opened.error().message, opened.error().code};
  fd_ = std::move(*opened);
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) {
    Error e = errno_error(path_);
    fd_.reset();
    return e;
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) return Ok{};
  std::string header(header_);
  header += '\n';
  Status s = write(header);
  // Without its header the file would not read back: try it all again later.
  if (!s) fd_.reset();
  return s;
}

Status TimelineWriter::File::rotate() {
  fd_.reset();
  if (keep_ == 0) return reopen(O_TRUNC);
  for (unsigned i = keep_; i > 0; --i) {
    std::string from = i == 1 ? name_ : name_ + "." + std::to_string(i - 1);
    std::string to = name_ + "." + std::to_string(i);
    if (::renameat(dirfd_, from.c_str(), dirfd_, to.c_str()) != 0 && errno != ENOENT)
      return errno_error("rename " + from + " to " + to + " in " + dir_of(path_));
  }
  return reopen(0);
}

Status TimelineWriter::File::rotate_if_used() {
  if (!fd_) {
    if (Status s = open(); !s) return s;
  }
  return has_rows() ? rotate() : Status(Ok{});
}

Status TimelineWriter::File::write(std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd_.get(), data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    int err = n < 0 ? errno : EIO;
    // Half a row would break the file for its readers: cut it off again (or,
    // failing that, reopen to learn the size before the next row).
    if (done > 0 && ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) fd_.reset();
    return errno_error("write " + path_, err);
  }
  size_ += data.size();
  return Ok{};
}

Status TimelineWriter::File::try_append(std::string_view row) {
  if (!fd_) {
    if (Status s = open(); !s) return s;
  }
  if (size_ + row.size() > max_size_ && has_rows()) {
    if (Status s = rotate(); !s) return s;
  }
  return write(row);
}

Status TimelineWriter::File::append(std::string_view row) {
  Status s = try_append(row);
  if (s) {
    failing_ = false;
    return s;
  }
  if (std::exchange(failing_, true)) return Ok{};
  return s;
}

TimelineWriter::TimelineWriter(const config::TimelineConfig& config, UniqueFd dir,
                               const std::string& base)
    : dir_(std::move(dir)),
      dir_path_(config.dir),
      base_(base),
      keep_(config.keep),
      samples_(dir_.get(), config.dir, base + ".csv", kSamplesHeader, config),
      events_(dir_.get(), config.dir, base + ".events.csv", kEventsHeader, config),
      started_(policies::Clock::now()) {
  row_.reserve(kRowCapacity);
}

Result<TimelineWriter> TimelineWriter::create(const config::TimelineConfig& config,
                                              const std::string& program, unsigned slot) {
  auto dir = open_private_dir(config.dir, kDirMode);
  if (!dir) return dir.error();
  TimelineWriter w(config, std::move(*dir), program + "." + std::to_string(slot));
  if (Status s = w.samples_.open(); !s) return s.error();
  if (Status s = w.events_.open(); !s) return s.error();
  return w;
}

Status TimelineWriter::start_run(unsigned generation, pid_t pid, policies::TimePoint started) {
  generation_ = generation;
  started_ = started;
  Status rotated = samples_.rotate_if_used();
  Status logged = event("start", pid, "");
  return rotated ? logged : rotated;
}

Result<std::string> TimelineWriter::diagnosis(std::string_view text) {
  auto name = [this](unsigned generation) {
    return base_ + ".diagnose." + std::to_string(generation) + ".txt";
  };
  std::string path = dir_path_ + "/" + name(generation_);
  auto opened =
      open_private_file(dir_.get(), name(generation_), O_WRONLY | O_CREAT | O_TRUNC, kFileMode);
  if (!opened) return Error{dir_path_ + "/" + opened.error().message, opened.error().code};
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(opened->get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_error(path);
    done += static_cast<size_t>(n);
  }
  forget_old_diagnoses();
  return path;
}

// Keeps the newest keep + 1 diagnoses of the slot (by generation).
void TimelineWriter::forget_old_diagnoses() {
  int fd = ::openat(dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return;
  }
  const std::string prefix = base_ + ".diagnose.";
  std::vector<std::pair<unsigned, std::string>> found;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (!n.starts_with(prefix) || !n.ends_with(".txt")) continue;
    std::string_view number = n.substr(prefix.size(), n.size() - prefix.size() - 4);
    unsigned g = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), g);
    if (ec == std::errc() && end == number.data() + number.size()) found.emplace_back(g, n);
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  for (size_t i = 0; i + keep_ + 1 < found.size(); ++i)
    ::unlinkat(dir_.get(), found[i].second.c_str(), 0);
}

Status TimelineWriter::sample(const policies::Sample& sample) {
  row_.clear();
  append_row(row_, sample, started_);
  row_ += '\n';
  return samples_.append(row_);
}

Status TimelineWriter::event(std::string_view event, pid_t pid, std::string_view detail) {
  auto since =
      std::chrono::duration_cast<std::chrono::milliseconds>(policies::Clock::now() - started_);
  row_.clear();
  append_event_row(row_, WallClock::now(), generation_, since, event, pid, detail);
  row_ += '\n';
  return events_.append(row_);
}

}  // namespace recycler::timeline
