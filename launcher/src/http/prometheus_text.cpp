#include "http/prometheus_text.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace ddp {
namespace {

const char* type_name(MetricType type) {
  switch (type) {
    case MetricType::kGauge: return "gauge";
    case MetricType::kCounter: return "counter";
    case MetricType::kUntyped: break;
  }
  return "untyped";
}

bool name_char(char c, bool first, bool colon) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return letter || (!first && c >= '0' && c <= '9');
}

}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_sample_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);  // fmt: the shortest decimal that reads back exactly
}

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, true)) return false;
  }
  return true;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, false)) return false;
  }
  return true;
}

void PrometheusText::declare(const std::string& name, MetricType type, const std::string& help) {
  if (!valid_metric_name(name)) throw std::logic_error(fmt::format("invalid metric name '{}'", name));
  const auto it = index_.find(name);
  if (it != index_.end()) {
    if (families_[it->second].type != type) {
      throw std::logic_error(fmt::format("metric '{}' declared again with another type", name));
    }
    return;
  }
  index_[name] = families_.size();
  families_.push_back({name, type, help, {}});
}

void PrometheusText::add(const std::string& name, const MetricLabels& labels, double value) {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error(fmt::format("metric '{}' was not declared", name));
  std::string line = name;
  if (!labels.empty()) {
    line += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (!valid_label_name(labels[i].first)) {
        throw std::logic_error(fmt::format("invalid label name '{}' on metric '{}'", labels[i].first, name));
      }
      if (i > 0) line += ',';
      line += labels[i].first;
      line += "=\"";
      line += escape_label_value(labels[i].second);
      line += '"';
    }
    line += '}';
  }
  line += ' ';
  line += format_sample_value(value);
  families_[it->second].lines.push_back(std::move(line));
}

size_t PrometheusText::sample_count() const {
  size_t n = 0;
  for (const Family& f : families_) n += f.lines.size();
  return n;
}

std::string PrometheusText::text() const {
  std::string out;
  for (const Family& f : families_) {
    if (f.lines.empty()) continue;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escape_help_text(f.help), f.name, type_name(f.type));
    for (const std::string& line : f.lines) {
      out += line;
      out += '\n';
    }
  }
  return out;
}

}  // namespace ddp
