#pragma once
// How `status` and `list` word --sync's live state (CheckpointSync's
// state_json(): {"targets": [{target, uploaded, uploaded_bytes, pending,
// failing, bytes_per_second, ...}]}).
//
// Threading: pure functions.

#include <string>

#include <nlohmann/json.hpp>

namespace ddp {

/// One line per target: "sync s3://bkt/run/: 3 uploaded (1.2 GiB at 85 MiB/s), 1 pending, 1 failing (a.pt: ...)".
/// Empty for null or malformed state.
std::string sync_state_lines(const nlohmann::json& state);

/// The targets summed, for a table cell: "3 up, 1 pending, 1 failing"; "-" for none.
std::string sync_state_cell(const nlohmann::json& state);

}  // namespace ddp
