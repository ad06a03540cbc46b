#pragma once
// UsageError: bad command line or environment. main() prints its message on
// one line ("ddplaunch: error: ...") and exits 2 before anything is started.

#include <stdexcept>
#include <string>

namespace ddp {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ddp
