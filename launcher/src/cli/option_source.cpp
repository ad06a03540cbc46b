// name_option_source (cli/launch_options.h): apart from the option parser, so
// the launch plan (and its fuzz target) can name a variable without CLI11.

#include <fmt/format.h>

#include <cctype>
#include <string>

#include "cli/launch_options.h"

namespace ddp {

std::string name_option_source(const LaunchOptions& o, const std::string& message) {
  const auto in_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  for (size_t at = message.find("--"); at != std::string::npos; at = message.find("--", at + 2)) {
    size_t end = at + 2;
    while (end < message.size() && in_name(message[end])) ++end;
    const std::string name = message.substr(at, end - at);
    const auto it = o.option_env.find(name);
    if (it == o.option_env.end()) continue;
    if (message.find(it->second) != std::string::npos) return message;  // it says so already
    return fmt::format("{} ({} is set by {})", message, name, it->second);
  }
  return message;
}

}  // namespace ddp
