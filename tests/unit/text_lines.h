#pragma once
// The lines of a rendered text (a table, a frame, a Prometheus page), for
// tests that check them one by one.

#include <sstream>
#include <string>
#include <vector>

namespace ddp::testing {

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace ddp::testing
