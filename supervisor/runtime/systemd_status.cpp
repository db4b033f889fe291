#include "supervisor/runtime/systemd_status.h"

#include <chrono>
#include <cstdlib>
#include <utility>

namespace recycler {

SystemdStatus::SystemdStatus(Timers& timers, LineFn line, NotifyFn notify)
    : timers_(timers), line_(std::move(line)), notify_(std::move(notify)) {}

void SystemdStatus::ready() {
  sent_ = line_();
  notify_("READY=1\nSTATUS=" + sent_);
  if (std::getenv("NOTIFY_SOCKET")) check_in_a_second();
}

void SystemdStatus::stopping() {
  timer_.reset();
  notify_("STOPPING=1");
}

void SystemdStatus::check_in_a_second() {
  timer_ = timers_.after(std::chrono::seconds(1), [this] {
    std::string line = line_();
    if (line != sent_) {
      sent_ = line;
      notify_("STATUS=" + line);
    }
    check_in_a_second();
  });
}

}  // namespace recycler
