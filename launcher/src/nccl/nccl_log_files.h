#pragma once
// Finding a job's NCCL logs and streaming them through an NcclLogParser.
// Files are read in large blocks with read(2) and split with memchr; no line
// is copied unless it straddles two blocks.
//
// Thread-safety: free functions without shared state.

#include <stdexcept>
#include <string>
#include <vector>

#include "nccl/nccl_diagnosis.h"
#include "nccl/nccl_log_parser.h"

namespace ddp::nccl {

/// Bad input for diagnose (a path that does not exist, a file that cannot be read).
class DiagnoseInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Expands PATHs: a file is taken as is; a directory is searched recursively
/// for nccl.log and *.log files (a job's LOGDIR/<job>/attempt_<k>/rank_<r>/),
/// sorted. Throws DiagnoseInputError for a path that does not exist.
std::vector<std::string> find_nccl_logs(const std::vector<std::string>& paths);

/// Streams one file into the parser. Throws DiagnoseInputError if it cannot be opened.
void feed_file(NcclLogParser& parser, const std::string& path);

/// find_nccl_logs + feed_file for each + summarize.
NcclDiagnosis diagnose_paths(const std::vector<std::string>& paths);

}  // namespace ddp::nccl
