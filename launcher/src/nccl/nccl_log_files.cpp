#include "nccl/nccl_log_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>

#include "ddp/common/unique_fd.h"

namespace ddp::nccl {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBlock = 4 << 20;          // read size
constexpr size_t kMaxLine = 1 << 20;        // longer lines are cut (the rest is dropped)

bool is_log_name(const fs::path& p) {
  std::string name = p.filename().string();
  return name == "nccl.log" || (name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0);
}

}  // namespace

std::vector<std::string> find_nccl_logs(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& path : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw DiagnoseInputError("no such file or directory: " + path);
    if (!fs::is_directory(st)) {
      out.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
    if (ec) throw DiagnoseInputError("cannot read directory " + path + ": " + ec.message());
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      std::error_code fec;
      if (it->is_regular_file(fec) && is_log_name(it->path())) found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

void feed_file(NcclLogParser& parser, const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw DiagnoseInputError("cannot open " + path + ": " + std::strerror(errno));
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  parser.add_file(path);
  // Small files (one rank's log) get a buffer of their size: no 4 MiB allocation per file.
  size_t block = kBlock;
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0)
    block = std::clamp<size_t>(static_cast<size_t>(st.st_size) + 1, 64 << 10, kBlock);
  std::unique_ptr<char[]> buf(new char[block]);
  std::string carry;  // an unfinished line from the previous block
  std::string_view source(path);
  while (true) {
    ssize_t n = ::read(fd.get(), buf.get(), block);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw DiagnoseInputError("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    parser.add_bytes(n);
    const char* p = buf.get();
    const char* end = p + n;
    if (!carry.empty()) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      const char* stop = nl ? nl : end;
      size_t room = kMaxLine > carry.size() ? kMaxLine - carry.size() : 0;
      carry.append(p, std::min(room, static_cast<size_t>(stop - p)));
      if (!nl) continue;
      parser.feed_line(carry, source);
      carry.clear();
      p = nl + 1;
    }
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (!nl) {
        carry.assign(p, std::min(kMaxLine, static_cast<size_t>(end - p)));
        break;
      }
      parser.feed_line(std::string_view(p, static_cast<size_t>(nl - p)), source);
      p = nl + 1;
    }
  }
  if (!carry.empty()) parser.feed_line(carry, source);
}

NcclDiagnosis diagnose_paths(const std::vector<std::string>& paths) {
  NcclLogParser parser;
  for (const auto& f : find_nccl_logs(paths)) feed_file(parser, f);
  return parser.summarize();
}

}  // namespace ddp::nccl
