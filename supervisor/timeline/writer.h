// Writes the timeline of one slot of one program (trace.h has the format):
// DIR/PROGRAM.SLOT.csv with a row per Sample and DIR/PROGRAM.SLOT.events.csv
// with a row per start, recycle, checkpoint or exit.
//
//   auto w = TimelineWriter::create(*program.timeline, program.name, slot);
//   w->start_run(generation, pid, started);   // at each start of the slot
//   w->sample(sample);                        // at each Sample
//   w->event("recycle", pid, reason);
//
// It runs on every Sample of every worker, so it stays cheap: both files stay
// open (O_APPEND), each row is formatted into one reused buffer and written
// with one write(). A file that would grow past max_size is rotated (FILE to
// FILE.1, FILE.1 to FILE.2, ..., keeping `keep` old files; keep 0 truncates;
// renames stay inside the directory fd),
// and so is the samples file at each new run, so that each run's samples start
// in a fresh file with t from 0. A file continued after a size rotation starts
// with the header again and t goes on.
//
// A failing write (disk full) is returned once, for the caller to log; while
// the file keeps failing, every later row is tried again and dropped quietly,
// and the next failure after a success is returned again. A partial row is
// cut off again, so the file stays readable.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "policies/policy.h"
#include "supervisor/config/config.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler::timeline {

class TimelineWriter {
 public:
  // Creates DIR (with its parents, mode 0750) when missing and opens both
  // files (created 0640), appending to what is there. Refuses a directory
  // or file another user could have planted or could swap (util/safe_dir.h):
  // the error says which and why.
  static Result<TimelineWriter> create(const config::TimelineConfig& config,
                                       const std::string& program, unsigned slot);

  // A new run of the slot (`started`: when its process was spawned): rotates
  // a samples file that has rows, and writes the `start` event.
  Status start_run(unsigned generation, pid_t pid, policies::TimePoint started);
  // One samples row, t relative to the run's start.
  Status sample(const policies::Sample& sample);
  // One events row: `event` is start, recycle, checkpoint, checkpointed or
  // exit; `pid` 0 leaves its cell empty.
  Status event(std::string_view event, pid_t pid, std::string_view detail);

  // DIR/PROGRAM.SLOT.diagnose.GENERATION.txt, written anew with `text` (what
  // diagnose: gathered before the current run was recycled); the `keep`
  // diagnoses before it are kept, older ones removed. Its path.
  Result<std::string> diagnosis(std::string_view text);

  const std::string& samples_path() const { return samples_.path(); }
  const std::string& events_path() const { return events_.path(); }

 private:
  // One CSV file with its header, its size as written, and its rotation.
  class File {
   public:
    // `dirfd` (the writer's, which outlives this File) holds `name`; `dir`
    // is its path, for messages.
    File(int dirfd, std::string dir, std::string name, std::string_view header,
         const config::TimelineConfig& config);

    const std::string& path() const { return path_; }
    // Opens the file (creating it with its header when it is new or empty).
    Status open();
    // Rotates it when it holds rows (FILE -> FILE.1 ...), then starts afresh.
    Status rotate_if_used();
    // Appends one row (newline included), rotating first when the row would
    // take the file past max_size. Reports a failure once (see above).
    Status append(std::string_view row);

   private:
    Status try_append(std::string_view row);
    Status rotate();
    Status reopen(int extra_flags);
    Status write(std::string_view data);
    bool has_rows() const { return size_ > header_.size() + 1; }

    int dirfd_;
    std::string name_;
    std::string path_;
    std::string_view header_;
    uint64_t max_size_;
    unsigned keep_;
    UniqueFd fd_;
    uint64_t size_ = 0;
    bool failing_ = false;
  };

  TimelineWriter(const config::TimelineConfig& config, UniqueFd dir, const std::string& base);
  void forget_old_diagnoses();

  UniqueFd dir_;  // before the files, which use it
  std::string dir_path_;
  std::string base_;  // PROGRAM.SLOT
  unsigned keep_;
  File samples_;
  File events_;
  unsigned generation_ = 0;
  policies::TimePoint started_;
  std::string row_;  // reused: no allocation per row once it has grown
};

}  // namespace recycler::timeline
