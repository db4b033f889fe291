#include <algorithm>

#include "policies/base/enums.h"
#include "policies/policy.h"

namespace recycler::policies {

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(std::string name, Factory factory, std::span<const std::string_view> keys) {
  factories_.push_back({std::move(name), std::move(factory), keys});
}

const Factory* Registry::find(std::string_view name) const {
  for (const auto& entry : factories_)
    if (entry.name == name) return &entry.factory;
  return nullptr;
}

std::span<const std::string_view> Registry::keys(std::string_view name) const {
  for (const auto& entry : factories_)
    if (entry.name == name) return entry.keys;
  return {};
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& entry : factories_) out.push_back(entry.name);
  std::sort(out.begin(), out.end());
  return out;
}

const char* to_string(Decision::Action action) {
  static constexpr EnumName<Decision::Action> kActions[] = {
      {Decision::Action::None, "none"},
      {Decision::Action::Restart, "restart"},
      {Decision::Action::Checkpoint, "checkpoint"},
      {Decision::Action::Signal, "signal"}};
  return enum_name(kActions, action);
}

}  // namespace recycler::policies
