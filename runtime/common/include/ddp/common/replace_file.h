#pragma once
// replace_file: sets a file's whole content at once. The text goes into a
// new file beside it (a unique name: the agents of a job whose nodes share
// the log folder write the same files at the same moment), which is then
// renamed over it, so a reader sees the old content or the new, never a
// mix of two writers' or a half-written file.
//
// Threading: safe from any thread; two callers on one path leave one's text.

#include <filesystem>
#include <string>
#include <system_error>

namespace ddp {

/// Replaces `path`'s content with `text`; false with `ec` set when the
/// folder cannot take it (the temporary file is then removed).
bool replace_file(const std::filesystem::path& path, const std::string& text, std::error_code& ec);

}  // namespace ddp
