// libFuzzer target for parse_stop_at_step (runtime/src/health.cpp): how a
// rank reads the stop request ddplaunch leaves at DDPLAUNCH_STOP_FILE. The
// bytes are the file's text.
// Invariants: the answer is nullopt, -1 (null: the next boundary) or the
// whole number written there, a non-negative int64; and that step, written
// back as ddplaunch writes it, reads back the same.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "ddp/runtime/health.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<int64_t> step = ddp::parse_stop_at_step(text);
  if (!step) return 0;
  FUZZ_CHECK(*step >= -1);
  const std::string written = *step < 0 ? std::string("null") : std::to_string(*step);
  FUZZ_CHECK(ddp::parse_stop_at_step("{\"stop_at_step\": " + written + ", \"reason\": \"SIGTERM\"}") == step);
  if (*step < 0) return 0;
  // The step is the whole number in the text, not a prefix of its digits.
  const std::size_t colon = text.find(':', text.find("\"stop_at_step\""));
  const std::size_t first = text.find_first_not_of(" \t\r\n", colon + 1);
  std::string digits = text.substr(first, text.find_first_not_of("0123456789", first) - first);
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  FUZZ_CHECK(digits == written);
  return 0;
}
