#include "output/byte_size.h"

#include <fmt/format.h>

#include <iterator>

namespace ddp {

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

}  // namespace ddp
