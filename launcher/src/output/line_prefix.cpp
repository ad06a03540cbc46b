#include "output/line_prefix.h"

#include <cctype>
#include <optional>

namespace ddp {
namespace {

bool identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::optional<std::string> field(const std::string& name, const LinePrefixFields& f) {
  if (name == "rank") return std::to_string(f.rank);
  if (name == "local_rank") return std::to_string(f.local_rank);
  if (name == "role_name") return f.role_name;
  if (name == "hostname") return f.hostname;
  return std::nullopt;
}

}  // namespace

std::string expand_line_prefix(const std::string& tmpl, const LinePrefixFields& fields) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] != '$' || i + 1 == tmpl.size()) {
      out += tmpl[i++];
      continue;
    }
    if (tmpl[i + 1] == '$') {
      out += '$';
      i += 2;
      continue;
    }
    const bool braced = tmpl[i + 1] == '{';
    const size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    if (end < tmpl.size() && identifier_start(tmpl[end])) {
      while (end < tmpl.size() && identifier_char(tmpl[end])) ++end;
    }
    const bool closed = !braced || (end < tmpl.size() && tmpl[end] == '}');
    const auto value = end > start && closed ? field(tmpl.substr(start, end - start), fields) : std::nullopt;
    if (!value) {  // not a known placeholder: kept as written
      out += tmpl[i++];
      continue;
    }
    out += *value;
    i = end + (braced ? 1 : 0);
  }
  return out;
}

}  // namespace ddp
