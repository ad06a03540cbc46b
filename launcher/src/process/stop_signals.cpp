#include "process/stop_signals.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>

#include "process/exit_status.h"  // signal_name

namespace ddp {
namespace {

std::vector<int>& configured() {
  static std::vector<int> signals{SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  return signals;
}

std::string trimmed_upper(std::string s) {
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// By number, or by name with or without "SIG" (sigabbrev_np gives "TERM" for 15).
std::optional<int> signal_number(const std::string& name) {
  if (!name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); })) {
    const int n = name.size() <= 2 ? std::stoi(name) : -1;
    return n >= 1 && n < NSIG ? std::optional<int>(n) : std::nullopt;
  }
  const std::string bare = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev != nullptr && bare == abbrev) return s;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<int>> parse_signal_list(const std::string& text, std::string& why) {
  std::vector<int> signals;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const std::string name = trimmed_upper(item);
    if (name.empty()) continue;
    const auto signo = signal_number(name);
    if (!signo) {
      why = fmt::format("'{}' is not a signal", item);
      return std::nullopt;
    }
    if (*signo == SIGKILL || *signo == SIGSTOP) {
      why = fmt::format("{} cannot be handled", signal_name(*signo));
      return std::nullopt;
    }
    if (*signo == SIGCHLD) {
      why = "SIGCHLD is how ddplaunch learns that a worker ended";
      return std::nullopt;
    }
    if (std::find(signals.begin(), signals.end(), *signo) == signals.end()) signals.push_back(*signo);
  }
  return signals;
}

void set_stop_signals(std::vector<int> signals) { configured() = std::move(signals); }

const std::vector<int>& stop_signals() { return configured(); }

}  // namespace ddp
