#include "topology/slurm_nodelist.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "cli/usage_error.h"

namespace ddp {
namespace {

// A node list that expands past this is a typo ("node[0-99999999]"), not a
// cluster; refusing it keeps a bad variable from eating the agent's memory.
constexpr std::size_t kMaxNodes = std::size_t{1} << 20;
// No host name is longer than a DNS name (253). Without this cap the node
// count alone does not bound the memory: a long name times 2^20 nodes is
// gigabytes, from a list of a few kilobytes.
constexpr std::size_t kMaxHostName = 255;

// Every node-list error quotes the whole variable and the piece at fault, so
// the user can find it in a long list.
[[noreturn]] void malformed_nodelist(const std::string& whole, const std::string& why, const std::string& part) {
  throw UsageError(fmt::format("malformed Slurm node list '{}': {} in '{}'", whole, why, part));
}

// Commas separate hosts only outside brackets: "a[1,3],b" is two patterns.
std::vector<std::string> split_host_patterns(const std::string& list) {
  std::vector<std::string> patterns;
  std::string current;
  bool in_brackets = false;
  for (const char c : list) {
    if (std::isspace(static_cast<unsigned char>(c))) malformed_nodelist(list, "whitespace", list);
    if (c == '[') {
      if (in_brackets) malformed_nodelist(list, "nested '['", current + c);
      in_brackets = true;
    } else if (c == ']') {
      if (!in_brackets) malformed_nodelist(list, "']' without '['", current + c);
      in_brackets = false;
    } else if (c == ',' && !in_brackets) {
      if (current.empty()) malformed_nodelist(list, "empty host name", list);
      patterns.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += c;
  }
  if (in_brackets) malformed_nodelist(list, "unclosed '['", current);
  if (current.empty()) malformed_nodelist(list, "empty host name", list);
  patterns.push_back(std::move(current));
  return patterns;
}

// Digits only, and few enough to fit an int: node numbers, not hostnames.
long parse_node_number(const std::string& digits, const std::string& whole, const std::string& part) {
  const bool ok = !digits.empty() && digits.size() <= 9 && std::all_of(digits.begin(), digits.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (!ok) malformed_nodelist(whole, fmt::format("'{}' is not a node number", digits), part);
  return std::stol(digits);
}

// One "lo-hi" or "n" inside brackets. Slurm pads to the width of the lower
// bound, so "01-10" keeps two digits and "8-10" none.
void expand_range(const std::string& range, const std::string& whole, const std::string& part,
                  std::vector<std::string>& out) {
  const auto dash = range.find('-');
  const std::string lo_text = range.substr(0, dash);
  const long lo = parse_node_number(lo_text, whole, part);
  const long hi = dash == std::string::npos ? lo : parse_node_number(range.substr(dash + 1), whole, part);
  if (hi < lo) malformed_nodelist(whole, fmt::format("range '{}' runs backwards", range), part);
  if (static_cast<std::size_t>(hi - lo) >= kMaxNodes - out.size()) {
    malformed_nodelist(whole, fmt::format("more than {} nodes", kMaxNodes), part);
  }
  for (long n = lo; n <= hi; ++n) out.push_back(fmt::format("{:0{}}", n, lo_text.size()));
}

// The body of one bracket group, "01-03,07", as the strings it stands for.
std::vector<std::string> expand_bracket(const std::string& body, const std::string& whole, const std::string& part) {
  if (body.empty()) malformed_nodelist(whole, "empty brackets", part);
  std::vector<std::string> numbers;
  std::size_t start = 0;
  while (true) {
    const auto comma = body.find(',', start);
    const std::string range = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (range.empty()) malformed_nodelist(whole, "empty range", part);
    expand_range(range, whole, part, numbers);
    if (comma == std::string::npos) return numbers;
    start = comma + 1;
  }
}

// One host pattern with any number of bracket groups: the groups multiply out,
// the leftmost varying slowest ("r[1-2]-n[1-2]" -> r1-n1 r1-n2 r2-n1 r2-n2).
std::vector<std::string> expand_host_pattern(const std::string& pattern, const std::string& whole) {
  std::vector<std::string> hosts{""};
  std::size_t longest = 0;  // checked before the names grow, not after
  const auto check_longest = [&] {
    if (longest > kMaxHostName) {
      malformed_nodelist(whole, fmt::format("a host name longer than {} characters", kMaxHostName), pattern);
    }
  };
  std::size_t pos = 0;
  while (pos < pattern.size()) {
    const auto open = pattern.find('[', pos);
    const std::string literal = pattern.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    longest += literal.size();
    check_longest();
    for (auto& h : hosts) h += literal;
    if (open == std::string::npos) break;
    const auto close = pattern.find(']', open);  // present: split_host_patterns checked the brackets
    const auto choices = expand_bracket(pattern.substr(open + 1, close - open - 1), whole, pattern);
    if (hosts.size() * choices.size() > kMaxNodes) {
      malformed_nodelist(whole, fmt::format("more than {} nodes", kMaxNodes), pattern);
    }
    longest += std::max_element(choices.begin(), choices.end(), [](const std::string& a, const std::string& b) {
                 return a.size() < b.size();
               })->size();
    check_longest();
    std::vector<std::string> grown;
    grown.reserve(hosts.size() * choices.size());
    for (const auto& h : hosts) {
      for (const auto& c : choices) grown.push_back(h + c);
    }
    hosts = std::move(grown);
    pos = close + 1;
  }
  return hosts;
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  for (const auto& pattern : split_host_patterns(nodelist)) {
    auto expanded = expand_host_pattern(pattern, nodelist);
    if (hosts.size() + expanded.size() > kMaxNodes) {
      malformed_nodelist(nodelist, fmt::format("more than {} nodes", kMaxNodes), pattern);
    }
    hosts.insert(hosts.end(), expanded.begin(), expanded.end());
  }
  return hosts;
}

}  // namespace ddp
