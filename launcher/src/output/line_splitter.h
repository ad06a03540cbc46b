#pragma once
// LineSplitter: turns a byte stream into whole lines. A worker's output
// arrives in arbitrary chunks; the console must only ever see whole lines so
// that ranks never interleave mid-line.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ddp {

class LineSplitter {
 public:
  /// A line longer than max_line is emitted in pieces of that size, so one
  /// runaway writer cannot make the launcher buffer without bound.
  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line) {}

  /// Calls on_line for every line completed by data (without the '\n').
  void feed(std::string_view data, const std::function<void(std::string_view)>& on_line);
  /// Emits the unterminated rest, if any (at end of stream).
  void flush(const std::function<void(std::string_view)>& on_line);

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace ddp
