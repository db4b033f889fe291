#include "supervisor/metrics/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace recycler::metrics {
namespace {

void append_escaped(std::string& out, std::string_view s, bool quotes) {
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quotes)
      out += "\\\"";
    else
      out += c;
  }
}

void append_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(value));
  } else {
    fmt::format_to(std::back_inserter(out), "{}", value);
  }
}

const char* type_name(Type type) {
  switch (type) {
    case Type::Counter:
      return "counter";
    case Type::Gauge:
      return "gauge";
    case Type::Histogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += value;
}

void TextWriter::family(std::string_view name, std::string_view help, Type type) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  append_escaped(out_, help, false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type_name(type);
  out_ += '\n';
}

void TextWriter::labels(std::span<const Label> labels, const Label* extra) {
  if (labels.empty() && !extra) return;
  out_ += '{';
  bool first = true;
  auto one = [&](const Label& l) {
    if (!first) out_ += ',';
    first = false;
    out_ += l.name;
    out_ += "=\"";
    append_escaped(out_, l.value, true);
    out_ += '"';
  };
  for (const Label& l : labels) one(l);
  if (extra) one(*extra);
  out_ += '}';
}

void TextWriter::sample(std::string_view name, std::span<const Label> l, double value) {
  out_ += name;
  labels(l);
  out_ += ' ';
  append_value(out_, value);
  out_ += '\n';
}

void TextWriter::sample(std::string_view name, std::span<const Label> l, uint64_t value) {
  out_ += name;
  labels(l);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void TextWriter::histogram(std::string_view name, std::span<const Label> l, const Histogram& h) {
  std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  std::string le;
  for (size_t i = 0; i <= h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    le.clear();
    if (i < h.bounds().size())
      append_value(le, h.bounds()[i]);
    else
      le = "+Inf";
    Label extra{"le", le};
    out_ += bucket;
    labels(l, &extra);
    fmt::format_to(std::back_inserter(out_), " {}\n", cumulative);
  }
  sample(std::string(name) + "_sum", l, h.sum());
  sample(std::string(name) + "_count", l, h.count());
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  append_escaped(out, value, true);
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  append_escaped(out, help, false);
  return out;
}

std::string format_value(double value) {
  std::string out;
  append_value(out, value);
  return out;
}

}  // namespace recycler::metrics
