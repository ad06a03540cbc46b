#pragma once
// The console prefix of a worker's lines from a template, as torchrun builds it
// from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: Python string.Template's
// safe_substitute of ${rank}, ${local_rank}, ${role_name} (and ${hostname}),
// also written $rank; "$$" is a dollar sign; anything else stays as written.
// Pure.

#include <string>

namespace ddp {

struct LinePrefixFields {
  int rank = 0;
  int local_rank = 0;
  std::string role_name;
  std::string hostname;
};

std::string expand_line_prefix(const std::string& tmpl, const LinePrefixFields& fields);

}  // namespace ddp
