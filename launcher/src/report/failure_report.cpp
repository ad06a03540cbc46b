#include "report/failure_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

namespace ddp {
namespace {

nlohmann::json nullable(bool present, int value) { return present ? nlohmann::json(value) : nlohmann::json(nullptr); }

void append_indented(std::string& out, const std::string& text, const char* indent) {
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out += indent;
    out.append(text, start, nl - start);
    out += '\n';
    start = nl + 1;
  }
}

}  // namespace

std::optional<nlohmann::json> read_error_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::nullopt;
  return doc;
}

std::string read_fatal_stack(const std::filesystem::path& path) {
  constexpr std::streamoff kMaxBytes = 16 * 1024;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamoff size = in.tellg();
  if (size <= 0) return {};
  const std::streamoff start = std::max<std::streamoff>(0, size - kMaxBytes);
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  // Python 3.11+ ends the dump with the list of loaded extension modules:
  // long, and not where the rank was.
  const size_t modules = text.rfind("\nExtension modules: ");
  if (modules != std::string::npos) text.erase(modules);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::optional<std::string> traceback_of(const nlohmann::json& error_file) {
  const nlohmann::json::json_pointer pointer("/message/extraInfo/py_callstack");
  if (error_file.contains(pointer) && error_file.at(pointer).is_string()) {
    return error_file.at(pointer).get<std::string>();
  }
  return std::nullopt;
}

nlohmann::json failure_to_json(const WorkerRecord& worker, const FailureEvidence& evidence) {
  const ExitStatus status = worker.exit.value_or(ExitStatus{});
  const bool by_signal = status.signal != 0;
  nlohmann::json traceback = nullptr;
  if (evidence.error_file) {
    if (auto tb = traceback_of(*evidence.error_file)) traceback = *tb;
  }
  if (traceback.is_null() && !evidence.fatal_stack.empty()) traceback = evidence.fatal_stack;
  return {
      {"rank", worker.rank},
      {"local_rank", worker.local_rank},
      {"pid", worker.pid},
      {"exit_code", nullable(!by_signal, status.code)},
      {"signal", nullable(by_signal, status.signal)},
      {"signal_name", by_signal ? nlohmann::json(signal_name(status.signal)) : nlohmann::json(nullptr)},
      {"description", status.describe()},
      {"likely_oom", evidence.likely_oom},
      {"time", format_iso8601(worker.exit_time)},
      {"stderr_tail", evidence.stderr_tail},
      {"error_file", evidence.error_file ? *evidence.error_file : nlohmann::json(nullptr)},
      {"traceback", traceback},
      {"fatal_stack", evidence.fatal_stack.empty() ? nlohmann::json(nullptr) : nlohmann::json(evidence.fatal_stack)},
  };
}

nlohmann::json attempt_report_to_json(const std::string& job_id, int attempt, const WorkerRecord& root_cause,
                                      const nlohmann::json& failures, const std::vector<WorkerRecord>& workers) {
  nlohmann::json rows = nlohmann::json::array();
  for (const WorkerRecord& w : workers) {
    const ExitStatus status = w.exit.value_or(ExitStatus{});
    rows.push_back({
        {"rank", w.rank},
        {"local_rank", w.local_rank},
        {"pid", w.pid},
        {"state", to_string(w.state)},
        {"exit_code", nullable(w.exit && status.signal == 0, status.code)},
        {"signal", nullable(w.exit && status.signal != 0, status.signal)},
    });
  }
  nlohmann::json root = nullptr;
  for (const auto& f : failures) {
    if (f.at("rank") == root_cause.rank) root = f;
  }
  return {{"job_id", job_id}, {"attempt", attempt}, {"root_cause", root}, {"failures", failures}, {"workers", rows}};
}

std::string format_failure(int node_rank, const WorkerRecord& worker, const FailureEvidence& evidence) {
  const ExitStatus status = worker.exit.value_or(ExitStatus{});
  std::string out = fmt::format("rank {} (node {}, local rank {}, pid {}) failed: {}{} at {}\n", worker.rank,
                                node_rank, worker.local_rank, worker.pid, status.describe(),
                                evidence.likely_oom ? " -- likely OOM-killed (the kernel's oom_kill count rose)" : "",
                                format_iso8601(worker.exit_time));
  if (!evidence.stderr_tail.empty()) {
    out += fmt::format("  last {} lines of its stderr:\n", evidence.stderr_tail.size());
    for (const auto& line : evidence.stderr_tail) append_indented(out, line, "    | ");
  }
  if (evidence.error_file) {
    if (auto tb = traceback_of(*evidence.error_file)) {
      out += "  traceback (from TORCHELASTIC_ERROR_FILE):\n";
      append_indented(out, *tb, "    ");
    }
  }
  if (!evidence.fatal_stack.empty()) {
    out += fmt::format("  Python stack at the fatal signal ({}):\n", kFatalStackFileName);
    append_indented(out, evidence.fatal_stack, "    ");
  }
  return out;
}

}  // namespace ddp
