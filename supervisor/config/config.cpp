#include "supervisor/config/config.h"

namespace recycler::config {

const ProgramConfig* Config::find(const std::string& name) const {
  for (const auto& program : programs)
    if (program.name == name) return &program;
  return nullptr;
}

}  // namespace recycler::config
