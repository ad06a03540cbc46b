#pragma once
// argparse-style abbreviations of long options, as torchrun's parser accepts
// them: `--redirect=3` means `--redirects=3`, `--nproc=2` means
// `--nproc-per-node=2`, as long as the prefix names one option (its dash and
// underscore spellings count as one). CLI11 knows only whole names, so the
// command line is rewritten before CLI11 sees it.
//
// Pure: reads only the options declared on the app.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ddp {

/// Returns args with every unambiguous prefix of a long option replaced by
/// the option's full name (a `=value` part is kept). Stops at "--" and at the
/// first argument that is not an option (the program: what follows is its
/// own). An exact name is never rewritten; an unknown one is left for CLI11 to
/// refuse. Throws UsageError for an ambiguous prefix, naming the candidates.
std::vector<std::string> expand_option_abbreviations(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace ddp
