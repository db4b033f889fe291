#include "supervisor/cgroup/oomd_marks.h"

#include <sys/xattr.h>

#include <cerrno>
#include <cstring>

namespace recycler::cgroup {

std::vector<std::pair<std::string, std::string>> oomd_marks(config::BudgetPreference preference) {
  switch (preference) {
    case config::BudgetPreference::None:
      return {};
    case config::BudgetPreference::Prefer:
      return {{"trusted.oomd_prefer", "1"}, {"user.oomd_prefer", "1"}};
    case config::BudgetPreference::Avoid:
      return {{"user.oomd_avoid", "1"}, {"trusted.oomd_avoid", "1"}};
    case config::BudgetPreference::Omit:
      return {{"user.oomd_omit", "1"}, {"trusted.oomd_avoid", "1"}};
  }
  return {};
}

std::string mark_for_oomd(const WorkerCgroup& cgroup, config::BudgetPreference preference) {
  auto marks = oomd_marks(preference);
  if (marks.empty()) return "";
  auto dir = cgroup.memory_dir();
  if (!dir) return "it has no memory cgroup";
  // The directory fd is O_PATH, which fsetxattr() refuses; its /proc/self/fd
  // link names the directory itself.
  std::string path = "/proc/self/fd/" + std::to_string(dir->fd);
  std::string failed;
  for (const auto& [name, value] : marks) {
    if (::setxattr(path.c_str(), name.c_str(), value.data(), value.size(), 0) == 0) continue;
    if (!failed.empty()) failed += ", ";
    failed += name + ": " + std::strerror(errno);
  }
  return failed;
}

}  // namespace recycler::cgroup
