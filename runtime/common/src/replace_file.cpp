#include "ddp/common/replace_file.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "ddp/common/unique_fd.h"

namespace ddp {
namespace {

/// A name beside `path` that no other writer uses: this host, this process,
/// this call (the nodes sharing a folder may reuse each other's pids).
std::string temporary_name(const std::filesystem::path& path) {
  static std::atomic<unsigned> calls{0};
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return path.string() + ".tmp." + host + "." + std::to_string(::getpid()) + "." + std::to_string(calls++);
}

}  // namespace

bool replace_file(const std::filesystem::path& path, const std::string& text, std::error_code& ec) {
  ec.clear();
  const std::string temporary = temporary_name(path);
  // Made as any new file is (0666 less the umask), like the one it replaces.
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0) {
    ec.assign(errno, std::generic_category());
    return false;
  }
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ec.assign(n < 0 ? errno : EIO, std::generic_category());
      break;
    }
    done += static_cast<size_t>(n);
  }
  // Network filesystems report write-back errors only at close.
  if (const int err = fd.close(); !ec && err != 0) ec.assign(err, std::generic_category());
  if (!ec) std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    return false;
  }
  return true;
}

}  // namespace ddp
