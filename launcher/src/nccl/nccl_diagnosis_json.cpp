#include "nccl/nccl_diagnosis.h"

namespace ddp::nccl {
namespace {

using nlohmann::json;

json int_or_null(int64_t v) { return v < 0 ? json(nullptr) : json(v); }
json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

nlohmann::json to_json(const NcclDiagnosis& d) {
  json j;
  j["files"] = d.files;
  j["stats"] = {{"bytes", d.stats.bytes},
                {"lines", d.stats.lines},
                {"nccl_lines", d.stats.nccl_lines},
                {"unknown_nccl_lines", d.stats.unknown_nccl_lines},
                {"non_nccl_lines", d.stats.non_nccl_lines},
                {"error_traces", d.stats.error_traces}};
  j["versions"] = json::array();
  for (const auto& v : d.versions) j["versions"].push_back({{"version", v.version}, {"processes", v.processes}});

  j["communicators"] = json::array();
  for (const auto& c : d.communicators) {
    j["communicators"].push_back({{"comm_id", str_or_null(c.comm_id)},
                                  {"nranks", int_or_null(c.nranks)},
                                  {"ranks_complete", c.ranks_complete},
                                  {"ranks_missing", c.ranks_missing},
                                  {"ranks_started_not_complete", c.ranks_started_not_complete},
                                  {"ranks_not_seen", c.ranks_not_seen},
                                  {"hosts", c.hosts}});
  }
  j["ranks"] = json::array();
  for (const auto& r : d.ranks) {
    j["ranks"].push_back({{"comm_id", str_or_null(r.comm_id)},
                          {"host", r.host},
                          {"pid", int_or_null(r.pid)},
                          {"rank", r.rank},
                          {"nranks", int_or_null(r.nranks)},
                          {"cuda_dev", int_or_null(r.cuda_dev)},
                          {"nvml_dev", int_or_null(r.nvml_dev)},
                          {"bus_id", str_or_null(r.bus_id)},
                          {"init_started", r.init_started},
                          {"init_complete", r.init_complete},
                          {"destroyed", r.destroyed},
                          {"init_seconds", r.init_seconds < 0 ? json(nullptr) : json(r.init_seconds)},
                          {"nccl_version", str_or_null(r.nccl_version)},
                          {"coll_channels", int_or_null(r.coll_channels)},
                          {"nvls_channels", int_or_null(r.nvls_channels)},
                          {"collnet_channels", int_or_null(r.collnet_channels)},
                          {"p2p_channels", int_or_null(r.p2p_channels)},
                          {"source", r.source}});
  }
  j["processes"] = json::array();
  for (const auto& p : d.processes) {
    j["processes"].push_back({{"host", p.host},
                              {"pid", p.pid},
                              {"nccl_version", str_or_null(p.nccl_version)},
                              {"bootstrap_interface", str_or_null(p.bootstrap_interface)},
                              {"bootstrap_address", str_or_null(p.bootstrap_address)},
                              {"network", str_or_null(p.network)},
                              {"lines", p.lines},
                              {"warnings", p.warnings},
                              {"ranks", p.ranks},
                              {"source", p.source}});
  }
  j["transports"] = json::array();
  for (const auto& t : d.transports) {
    j["transports"].push_back({{"comm_id", str_or_null(t.comm_id)},
                               {"src_rank", t.src_rank},
                               {"dst_rank", t.dst_rank},
                               {"src_host", str_or_null(t.src_host)},
                               {"dst_host", str_or_null(t.dst_host)},
                               {"transport", t.transport},
                               {"channels", t.channels},
                               {"gdr", t.gdr}});
  }
  j["host_links"] = json::array();
  for (const auto& h : d.host_links) {
    j["host_links"].push_back({{"src_host", str_or_null(h.src_host)},
                               {"dst_host", str_or_null(h.dst_host)},
                               {"transport", h.transport},
                               {"rank_pairs", h.rank_pairs},
                               {"channels", h.channels},
                               {"gdr", h.gdr}});
  }
  json ifaces = json::array();
  for (const auto& i : d.network.interfaces)
    ifaces.push_back({{"host", i.host}, {"interface", i.interface}, {"address", i.address}});
  j["network"] = {{"in_use", d.network.in_use},
                  {"devices", d.network.devices},
                  {"interfaces", ifaces},
                  {"env", d.network.env},
                  {"nvls_available", d.network.nvls_available},
                  {"nvls_unavailable", d.network.nvls_unavailable}};
  j["warnings"] = json::array();
  for (const auto& w : d.warnings) {
    j["warnings"].push_back({{"class", w.cls},
                             {"count", w.count},
                             {"hint", str_or_null(w.hint)},
                             {"example", w.example},
                             {"location", str_or_null(w.location)},
                             {"processes", w.processes},
                             {"peers", w.peers},
                             {"peer_hosts", w.peer_hosts}});
  }
  return j;
}

}  // namespace ddp::nccl
