#include "sync/sync_target.h"

#include <algorithm>
#include <cctype>

namespace ddp {
namespace {

constexpr const char* kScheme = "s3://";

bool valid_bucket(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  const auto allowed = [](char c) { return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-'; };
  const auto alnum = [](char c) { return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)); };
  return std::all_of(b.begin(), b.end(), allowed) && alnum(b.front()) && alnum(b.back()) &&
         b.find("..") == std::string::npos;
}

}  // namespace

std::optional<SyncTarget> parse_sync_target(const std::string& spec, std::string& why) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    why = "'" + spec + "' is not DIR=s3://BUCKET/PREFIX";
    return std::nullopt;
  }
  SyncTarget t;
  t.dir = spec.substr(0, eq);
  const std::string url = spec.substr(eq + 1);
  if (t.dir.empty()) {
    why = "'" + spec + "' names no local folder before '='";
    return std::nullopt;
  }
  if (url.rfind(kScheme, 0) != 0) {
    why = "'" + url + "' is not an s3:// URL (DIR=s3://BUCKET/PREFIX)";
    return std::nullopt;
  }
  const std::string rest = url.substr(std::char_traits<char>::length(kScheme));
  const size_t slash = rest.find('/');
  t.bucket = rest.substr(0, slash);
  if (!valid_bucket(t.bucket)) {
    why = "'" + t.bucket + "' is not a valid bucket name (3-63 of a-z, 0-9, '.', '-')";
    return std::nullopt;
  }
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  // One '/' between parts: "a//b/" is "a/b/".
  std::string clean;
  for (char c : prefix) {
    if (c == '/' && (clean.empty() || clean.back() == '/')) continue;
    clean += c;
  }
  if (!clean.empty() && clean.back() != '/') clean += '/';
  t.prefix = clean;
  return t;
}

std::string object_key(const SyncTarget& target, const std::string& relative_path) {
  return target.prefix + relative_path;
}

std::string describe(const SyncTarget& target) { return std::string(kScheme) + target.bucket + "/" + target.prefix; }

}  // namespace ddp
