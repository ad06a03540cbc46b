#pragma once
// This machine's name as gethostname(2) gives it (what workers' reports and
// torchrun's failure summaries call "host").

#include <string>

namespace ddp {

std::string this_host_name();

}  // namespace ddp
