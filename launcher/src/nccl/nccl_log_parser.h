#pragma once
// NcclLogParser: reads NCCL log lines one at a time (from any number of files,
// ranks and hosts, in any order) and keeps what the summary needs; summarize()
// turns that into an NcclDiagnosis. Memory grows with the number of ranks,
// processes, rank pairs and distinct warnings, not with the number of lines.
//
// Thread-safety: none; one parser per thread (feed from one reader).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nccl/nccl_diagnosis.h"
#include "nccl/nccl_log_line.h"

namespace ddp::nccl {

class NcclLogParser {
 public:
  NcclLogParser();
  ~NcclLogParser();
  NcclLogParser(const NcclLogParser&) = delete;
  NcclLogParser& operator=(const NcclLogParser&) = delete;

  /// One line (without '\n'). source names where it came from (a file path);
  /// a bare "NCCL version" line is credited to the last process seen in it.
  void feed_line(std::string_view line, std::string_view source = {});

  /// Records that a file was read (listed in NcclDiagnosis::files).
  void add_file(std::string path) { files_.push_back(std::move(path)); }
  void add_bytes(int64_t n) { stats_.bytes += n; }

  NcclDiagnosis summarize() const;

 private:
  struct State;
  void on_line(const NcclLogLine& l, std::string_view source);
  int process_index(const NcclLogLine& l, std::string_view source);

  std::vector<std::string> files_;
  NcclLineStats stats_;
  std::unique_ptr<State> s_;
};

}  // namespace ddp::nccl
