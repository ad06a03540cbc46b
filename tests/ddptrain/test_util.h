// Helpers for tests/ddptrain: a temporary folder and the Python peer.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::train::testing {

/// mkdtemp folder under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/ddptrain-test-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline constexpr const char* kPython = "/usr/bin/python3";

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Runs `code` with /usr/bin/python3 (cwd = dir); returns the exit status
/// and puts stdout+stderr in *log.
inline int run_python(const TempDir& dir, const std::string& code, std::string* log = nullptr) {
  const std::string script = dir.file("script.py");
  const std::string out = dir.file("python.log");
  {
    std::ofstream f(script);
    f << code;
  }
  const std::string cmd = "cd '" + dir.path() + "' && " + kPython + " '" + script + "' > '" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  if (log) *log = read_text(out);
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

/// Whether /usr/bin/python3 can import torch (checked once).
inline bool python_has_torch() {
  static const bool available = [] {
    if (::access(kPython, X_OK) != 0) return false;
    const std::string cmd = std::string(kPython) + " -c 'import torch' > /dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return available;
}

}  // namespace ddp::train::testing
