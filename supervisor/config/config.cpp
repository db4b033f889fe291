#include "supervisor/config/config.h"

namespace recycler::config {

// The spellings match what the config file accepts, so logs and error
// messages can be pasted back into a config.
const char* to_string(RestartMode mode) {
  switch (mode) {
    case RestartMode::Always:
      return "always";
    case RestartMode::OnFailure:
      return "on-failure";
    case RestartMode::Never:
      return "never";
  }
  return "unknown";
}

const char* to_string(LogFormat format) {
  switch (format) {
    case LogFormat::Text:
      return "text";
    case LogFormat::Json:
      return "json";
  }
  return "unknown";
}

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::Trace:
      return "trace";
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Error:
      return "error";
  }
  return "unknown";
}

const char* to_string(CheckpointTimeout on_timeout) {
  switch (on_timeout) {
    case CheckpointTimeout::Restart:
      return "restart";
    case CheckpointTimeout::Wait:
      return "wait";
  }
  return "unknown";
}

const ProgramConfig* Config::find(const std::string& name) const {
  for (const auto& program : programs)
    if (program.name == name) return &program;
  return nullptr;
}

}  // namespace recycler::config
