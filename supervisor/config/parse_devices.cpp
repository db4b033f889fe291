// A program's devices: section (supervisor/config/devices.h says what each
// key sets). `gpus: auto` is counted when recycler runs (runtime/gpu_pool.h);
// here only a site is left for check.cpp, which looks for NVML without
// loading it.
#include <cctype>
#include <cstdlib>
#include <set>

#include "supervisor/config/devices.h"
#include "supervisor/config/parse_util.h"

namespace recycler::config::detail {
namespace {

bool uuid_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '/';
}

// One entry of gpus: an index, or a UUID as `nvidia-smi -L` prints it
// (GPU-..., MIG-...; a MIG instance can only be named by its UUID).
std::optional<std::string> read_gpu(const Field& f, Report& r) {
  auto text = read_scalar(f, "a GPU index or UUID", r);
  if (!text) return std::nullopt;
  if (!text->empty() && fields::all_digits(*text)) {
    auto index = read_integer(f, 0, kMaxGpuIndex, r);
    if (!index) return std::nullopt;
    return std::to_string(*index);
  }
  bool uuid = (text->starts_with("GPU-") || text->starts_with("MIG-")) && text->size() > 4 &&
              std::all_of(text->begin(), text->end(), uuid_char);
  if (uuid) return text;
  r.error(f.mark(), f.path + ": invalid GPU " + quote(*text) +
                        "; expected an index (0, 1, ...) or a UUID as nvidia-smi -L shows it "
                        "(GPU-..., MIG-...)");
  return std::nullopt;
}

// gpus: a list, or auto (every GPU recycler is given, counted when it runs).
void parse_gpus(const Field& f, DevicesConfig& d, ProgramSites& sites, Report& r) {
  if (f.value.IsScalar() && f.value.Scalar() == "auto") {
    d.gpus_auto = true;
    sites.gpus_auto = Site{f.path, f.mark(), r.reserve(), {}};
    return;
  }
  if (!f.value.IsSequence() || f.value.size() == 0)
    return r.error(f.mark(), f.path + " must be a list of GPUs (indexes or UUIDs) or auto");
  std::set<std::string> seen;
  for (size_t i = 0; i < f.value.size(); ++i) {
    Field item = f.item(i, f.value[i]);
    auto gpu = read_gpu(item, r);
    if (!gpu) continue;
    if (!seen.insert(*gpu).second) {
      r.error(item.mark(), item.path + ": GPU " + *gpu + " is listed twice");
      continue;
    }
    d.gpus.push_back(*gpu);
  }
}

void parse_per_slot(const MapView& map, DevicesConfig& d, Report& r) {
  const Field* v = map.get("per_slot");
  if (!v) return;
  auto n = read_integer(*v, 1, kMaxGpusPerSlot, r);
  if (!n) return;
  if (!map.get("gpus"))
    return r.error(v->mark(), v->path + " needs gpus: the list (or auto) it takes GPUs from");
  if (!d.gpus.empty() && *n > d.gpus.size())
    return r.error(v->mark(), v->path + " (" + std::to_string(*n) + ") is more than the " +
                                  std::to_string(d.gpus.size()) +
                                  " GPUs gpus lists: a slot would get one twice");
  d.per_slot = static_cast<unsigned>(*n);
}

// The text between top-level commas (a bracketed list, as in
// roundup_power2_divisions:[256:1,512:2], is one value).
std::vector<std::string_view> split_options(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  return out;
}

// PyTorch reads PYTORCH_CUDA_ALLOC_CONF as NAME:VALUE options separated by
// commas, and fails the worker's first CUDA allocation on a malformed one:
// the shape is checked here, the names are PyTorch's business.
void parse_pytorch_alloc_conf(const Field& f, DevicesConfig& d, Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  std::string expected =
      "expected NAME:VALUE options separated by commas, e.g. "
      "\"expandable_segments:True,max_split_size_mb:128\"";
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty; " + expected);
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::string_view option : split_options(*text)) {
    size_t colon = option.find(':');
    bool valid = colon != std::string_view::npos && colon > 0 && colon + 1 < option.size() &&
                 std::all_of(option.begin(), option.begin() + colon, name_char) &&
                 std::none_of(option.begin(), option.end(), control_char);
    if (!valid)
      return r.error(f.mark(), f.path + ": invalid option " + quote(option) + " in " +
                                   quote(*text) + "; " + expected);
  }
  d.pytorch_alloc_conf = *text;
}

// A plain decimal above 0 and at most 1 ("0.5", ".75", "1").
void parse_mem_fraction(const Field& f, DevicesConfig& d, Report& r) {
  auto text = read_scalar(f, "a number", r);
  if (!text) return;
  std::string expected = "expected a fraction of the GPU's memory above 0 and at most 1, e.g. 0.5";
  bool plain = !text->empty() && text->find_first_not_of("0123456789.") == std::string::npos &&
               std::count(text->begin(), text->end(), '.') <= 1 && text->back() != '.';
  double fraction = plain ? std::strtod(text->c_str(), nullptr) : 0;
  if (!plain)
    r.error(f.mark(), f.path + ": invalid value " + quote(*text) + "; " + expected);
  else if (fraction <= 0 || fraction > 1)
    r.error(f.mark(), f.path + ": " + *text + " is out of range; " + expected);
  else
    d.xla_mem_fraction = fraction;
}

}  // namespace

void parse_devices(const Field& f, ProgramConfig& p, ProgramSites& sites, Report& r) {
  auto map = read_map(f, r, kDevicesKeys);
  if (!map) return;
  DevicesConfig& d = p.devices;
  if (auto* v = map->get("gpus")) parse_gpus(*v, d, sites, r);
  parse_per_slot(*map, d, r);
  if (auto* v = map->get("pytorch_alloc_conf")) parse_pytorch_alloc_conf(*v, d, r);
  if (auto* v = map->get("xla_preallocate")) d.xla_preallocate = read_bool(*v, r);
  if (auto* v = map->get("xla_mem_fraction")) parse_mem_fraction(*v, d, r);
}

}  // namespace recycler::config::detail
