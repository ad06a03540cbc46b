#include "cli/option_abbreviations.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "cli/usage_error.h"

namespace ddp {
namespace {

struct LongName {
  std::string name;  // without the dashes
  const CLI::Option* option;
};

std::vector<LongName> long_names(const CLI::App& app) {
  std::vector<LongName> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back({name, option});
  }
  return names;
}

bool takes_value(const CLI::Option* option) { return option->get_items_expected_min() > 0; }

// CLI11's type name of an option: "INT", "FLOAT", ... followed by its checks.
bool numeric(const CLI::Option* option) {
  const std::string type = option->get_type_name();
  for (const char* prefix : {"INT", "UINT", "FLOAT", "NUMBER"}) {
    if (type.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

const CLI::Option* short_option(const CLI::App& app, char letter) {
  for (const CLI::Option* option : app.get_options()) {
    const auto& shorts = option->get_snames();
    if (std::find(shorts.begin(), shorts.end(), std::string(1, letter)) != shorts.end()) return option;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> expand_option_abbreviations(const CLI::App& app, const std::vector<std::string>& args,
                                                     std::set<const CLI::Option*>* named) {
  const std::vector<LongName> names = long_names(app);
  std::vector<std::string> out;
  out.reserve(args.size());
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') break;  // the program and its own arguments
    if (arg[1] != '-') {  // -m, -r3, -r 3
      out.push_back(arg);
      const CLI::Option* option = short_option(app, arg[1]);
      if (option != nullptr && named != nullptr) named->insert(option);
      if (option != nullptr && takes_value(option) && arg.size() == 2 && i + 1 < args.size()) out.push_back(args[++i]);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string typed = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq);
    const CLI::Option* chosen = nullptr;
    std::string full = typed;
    const auto exact =
        std::find_if(names.begin(), names.end(), [&](const LongName& n) { return n.name == typed; });
    if (exact != names.end()) {
      chosen = exact->option;
    } else if (!typed.empty()) {
      std::set<const CLI::Option*> matches;
      std::vector<std::string> spelled;
      for (const LongName& n : names) {
        if (n.name.compare(0, typed.size(), typed) != 0) continue;
        if (matches.insert(n.option).second) spelled.push_back("--" + n.name);
        if (chosen == nullptr) full = n.name;
        chosen = n.option;
      }
      if (matches.size() > 1) {
        throw UsageError(fmt::format("ambiguous option: --{} could match {}", typed, fmt::join(spelled, ", ")));
      }
    }
    if (chosen != nullptr && named != nullptr) named->insert(chosen);
    if (chosen != nullptr && takes_value(chosen) && value == "=") {
      if (numeric(chosen)) throw UsageError(fmt::format("--{}= has no value: expected a number", full));
      out.push_back("--" + full);
      out.push_back("");  // CLI11 takes an empty argument as the value
      continue;
    }
    out.push_back(chosen != nullptr ? "--" + full + value : arg);
    if (chosen != nullptr && takes_value(chosen) && eq == std::string::npos && i + 1 < args.size()) {
      out.push_back(args[++i]);
    }
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

}  // namespace ddp
