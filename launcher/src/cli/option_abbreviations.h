#pragma once
// argparse-style abbreviations of long options, as torchrun's parser accepts
// them: `--redirect=3` means `--redirects=3`, `--nproc=2` means
// `--nproc-per-node=2`, as long as the prefix names one option (its dash and
// underscore spellings count as one). CLI11 knows only whole names, so the
// command line is rewritten before CLI11 sees it.
//
// Pure: reads only the options declared on the app.

#include <CLI/CLI.hpp>

#include <set>
#include <string>
#include <vector>

namespace ddp {

/// Returns args with every unambiguous prefix of a long option replaced by
/// the option's full name (a `=value` part is kept). Stops at "--" and at the
/// first argument that is not an option (the program: what follows is its
/// own). An exact name is never rewritten; an unknown one is left for CLI11 to
/// refuse. Throws UsageError for an ambiguous prefix, naming the candidates.
///
/// `--name=` with nothing after '=' gives the option an empty value, as
/// argparse does (CLI11 would take the next argument, the program, instead);
/// for a numeric option that is a UsageError. When `named` is given, it
/// receives every option the command line names.
std::vector<std::string> expand_option_abbreviations(const CLI::App& app, const std::vector<std::string>& args,
                                                     std::set<const CLI::Option*>* named = nullptr);

}  // namespace ddp
