#pragma once
// PrometheusText: the Prometheus text exposition format, version 0.0.4
// (what a server sends with Content-Type "text/plain; version=0.0.4").
//
// Debian 12 has no prometheus-cpp package, and all /metrics needs is the text
// format, so this small formatter writes it; its unit tests pin the escaping
// and the grouping (tests/unit/prometheus_text_test.cpp). Per the format:
//   - each metric name is one family: "# HELP name text", "# TYPE name type",
//     then every sample of that name, never split by another family;
//   - label values escape \ as \\, " as \" and a line feed as \n;
//     HELP text escapes \ as \\ and a line feed as \n;
//   - values are Go-style floats: NaN, +Inf, -Inf, else the shortest decimal
//     that reads back as the same double.
// Families are written in the order they were declared; a family without
// samples is left out.
//
// Threading: one exposition per thread (no shared state).

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

enum class MetricType { kGauge, kCounter, kUntyped };

/// Label name -> value, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

/// A label value as the format writes it between its quotes.
std::string escape_label_value(const std::string& value);
/// A HELP line's text as the format writes it.
std::string escape_help_text(const std::string& text);
/// A sample value: "NaN", "+Inf", "-Inf", or the shortest round-trip decimal.
std::string format_sample_value(double value);
/// [a-zA-Z_:][a-zA-Z0-9_:]*
bool valid_metric_name(const std::string& name);
/// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved by Prometheus).
bool valid_label_name(const std::string& name);

class PrometheusText {
 public:
  /// Declares a family. Declaring a name again with the same type is a
  /// no-op; with another type, or an invalid name, throws std::logic_error.
  void declare(const std::string& name, MetricType type, const std::string& help);
  /// Adds a sample to a declared family. Throws std::logic_error for an
  /// undeclared name or an invalid label name.
  void add(const std::string& name, const MetricLabels& labels, double value);
  size_t sample_count() const;
  /// The exposition, ending with a line feed (empty when nothing was added).
  std::string text() const;

 private:
  struct Family {
    std::string name;
    MetricType type = MetricType::kUntyped;
    std::string help;
    std::vector<std::string> lines;  // formatted samples
  };
  std::vector<Family> families_;
  std::map<std::string, size_t> index_;
};

}  // namespace ddp
