#include "trace_writer.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace ddp::train {
namespace {

double micros(SteadyTime t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

void TraceWriter::span(const std::string& name, TraceLane lane, SteadyTime start, SteadyTime end, int64_t step,
                       int64_t bytes) {
  spans_.push_back(Span{name, lane, start, end, step, bytes});
}

void TraceWriter::write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  const std::string process = "rank " + std::to_string(rank_);
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"args", {{"name", process}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  const char* lanes[] = {"compute", "communication"};
  for (int tid = 0; tid < 2; ++tid) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", tid}, {"args", {{"name", lanes[tid]}}}});
  }
  for (const Span& s : spans_) {
    nlohmann::json args = {{"step", s.step}};
    if (s.bytes >= 0) args["bytes"] = s.bytes;
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"pid", rank_},
                      {"tid", static_cast<int>(s.lane)},
                      {"ts", micros(s.start)},
                      {"dur", std::max(0.0, micros(s.end) - micros(s.start))},
                      {"args", args}});
  }
  std::ofstream out(path, std::ios::trunc);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  out.close();
  if (!out) throw std::runtime_error("cannot write the trace " + path + ": " + std::strerror(errno));
}

std::string trace_path_for_rank(const std::string& path, int rank) {
  if (rank == 0) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string stem = has_ext ? path.substr(0, dot) : path;
  const std::string ext = has_ext ? path.substr(dot) : std::string(".json");
  return stem + ".rank" + std::to_string(rank) + ext;
}

}  // namespace ddp::train
