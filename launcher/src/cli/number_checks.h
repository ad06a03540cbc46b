#pragma once
// CLI11 checks for numeric options whose refusal reads as one short line:
// CLI11's own NonNegativeNumber and PositiveNumber say "Value x not in range
// 0.000000 to 1797693134862315708145...", the upper bound spelled out in 309
// digits. CLI11 puts the option's name in front ("--max-restarts: ...").
//
// Threading: pure.

#include <CLI/CLI.hpp>

#include <string>

namespace ddp {

/// A number >= 0 (NaN is not).
inline CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !(v >= 0)) return "'" + text + "' is not a number >= 0";
        return {};
      },
      "NONNEGATIVE");
}

/// A number > 0 (NaN is not).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !(v > 0)) return "'" + text + "' is not a number > 0";
        return {};
      },
      "POSITIVE");
}

}  // namespace ddp
