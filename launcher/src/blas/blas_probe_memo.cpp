#include "blas/blas_probe_memo.h"

#include "ddp/common/replace_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

namespace ddp {

// What a memo keeps of a successful probe (an error is never kept).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BlasInfo, path, via, has_openblas, has_mkl, has_blis, config, core)

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The first processor's block of PROC/cpuinfo: it ends at the first blank
// line, and large machines list hundreds more.
std::string first_processor_of(const std::string& proc_root) {
  std::ifstream in(proc_root + "/cpuinfo");
  std::string block;
  for (std::string line; std::getline(in, line);) {
    if (trimmed(line).empty() && !block.empty()) break;
    block += line + "\n";
  }
  return block;
}

// What identifies the probed library file and this CPU; nullopt when there is
// no alternatives entry or the file cannot be stat'ed (always probe then).
std::optional<json> memo_key(const std::string& etc_root, const std::string& proc_root) {
  const BlasInfo where = blas_alternative(etc_root);
  struct stat st {};
  if (where.path.empty() || ::stat(where.path.c_str(), &st) != 0) return std::nullopt;
  return json{{"library", where.path},
              {"size", static_cast<int64_t>(st.st_size)},
              {"mtime_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec},
              {"inode", static_cast<uint64_t>(st.st_ino)},
              {"cpu", cpu_identity_from_cpuinfo(first_processor_of(proc_root))}};
}

// The remembered answer for `key`; nullopt when the memo is missing, damaged
// or about another file or CPU.
std::optional<BlasInfo> recall(const fs::path& memo_file, const json& key) {
  std::ifstream in(memo_file);
  if (!in) return std::nullopt;
  const json memo = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!memo.is_object() || memo.value("key", json()) != key) return std::nullopt;
  try {
    return memo.at("blas").get<BlasInfo>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// Best effort: a memo that cannot be written only means probing next time.
void remember(const fs::path& memo_file, const json& key, const BlasInfo& info) {
  std::error_code ec;
  replace_file(memo_file, json{{"key", key}, {"blas", info}}.dump(1) + "\n", ec);
}

}  // namespace

std::string cpu_identity_from_cpuinfo(const std::string& cpuinfo) {
  std::istringstream lines(cpuinfo);
  std::string identity;
  for (std::string line; std::getline(lines, line);) {
    if (trimmed(line).empty() && !identity.empty()) break;  // the first processor's block ends
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = trimmed(line.substr(0, colon));
    if (name == "vendor_id" || name == "cpu family" || name == "model" || name == "flags") {
      identity += name + ": " + trimmed(line.substr(colon + 1)) + "\n";
    }
  }
  return identity;
}

SystemProbe remember_blas_probe(SystemProbe probe, fs::path memo_file, std::string etc_root, std::string proc_root) {
  if (!probe.blas) return probe;
  probe.blas = [probe_blas = std::move(probe.blas), memo_file = std::move(memo_file), etc_root = std::move(etc_root),
                proc_root = std::move(proc_root)] {
    const std::optional<json> key = memo_key(etc_root, proc_root);
    if (!key) return probe_blas();
    if (std::optional<BlasInfo> known = recall(memo_file, *key)) return *known;
    const BlasInfo info = probe_blas();
    if (info.error.empty()) remember(memo_file, *key, info);
    return info;
  };
  return probe;
}

}  // namespace ddp
