#include "numa/cpu_list.h"

#include <fmt/format.h>

#include <cctype>
#include <sstream>

namespace ddp {
namespace {

std::optional<int> cpu_number(const std::string& text) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::stoi(text);
}

}  // namespace

std::optional<std::set<int>> parse_cpu_list(const std::string& text) {
  std::set<int> cpus;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    if (item.empty()) continue;
    const auto dash = item.find('-');
    const auto first = cpu_number(item.substr(0, dash));
    const auto last = dash == std::string::npos ? first : cpu_number(item.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

std::string format_cpu_list(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != cpus.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ',';
    out += first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
  }
  return out;
}

}  // namespace ddp
