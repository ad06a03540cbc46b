#include "companion/companion_install.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#ifndef DDP_PYTHON_COMPANION_SOURCE_DIR
#define DDP_PYTHON_COMPANION_SOURCE_DIR ""
#endif

namespace ddp {

std::string find_python_companion(std::string* looked_in) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::string tried;
  for (const fs::path& dir : {ec ? fs::path() : exe.parent_path().parent_path() / "share/ddplaunch/python",
                              fs::path(DDP_PYTHON_COMPANION_SOURCE_DIR)}) {
    if (dir.empty()) continue;
    tried += (tried.empty() ? "" : ", ") + dir.string();
    if (fs::is_regular_file(dir / "sitecustomize.py", ec) && fs::is_directory(dir / "_ddplaunch_companion", ec)) {
      return fs::weakly_canonical(dir, ec).string();
    }
  }
  if (looked_in) *looked_in = tried;
  return {};
}

}  // namespace ddp
