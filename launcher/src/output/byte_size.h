#pragma once
// Byte counts as people read them: "512 B", "4.0 KiB", "1.5 GiB" (binary
// units, one decimal), for reports, status tables and doctor checks alike.

#include <cstdint>
#include <string>

namespace ddp {

std::string format_bytes(int64_t bytes);

}  // namespace ddp
