#pragma once
// UsageError: bad command line or environment. main() prints its message on
// one line ("ddplaunch: error: ...") and exits 2 before anything is started.

#include <cstdio>
#include <stdexcept>
#include <string>

namespace ddp {

/// text with its control characters escaped (\n, \t, \xNN): a value quoted
/// in an error message cannot break it over two lines.
inline std::string printable_on_one_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(printable_on_one_line(message)) {}
};

}  // namespace ddp
