#include "nccl/nccl_log_parser.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <utility>

#include "nccl/nccl_warning.h"

namespace ddp::nccl {
namespace {

constexpr size_t kMaxListed = 32;  // processes / peers listed per warning group

std::string strip_cuda_suffix(std::string_view v) { return std::string(v.substr(0, v.find('+'))); }

/// Digits and hex runs become '#', so "peer 10.0.0.2<123>" and "<456>" group together.
std::string normalize_message(std::string_view m) {
  std::string out;
  out.reserve(std::min<size_t>(m.size(), 120));
  bool in_num = false;
  for (char c : m) {
    if (out.size() >= 120) break;
    if (c >= '0' && c <= '9') {
      if (!in_num) out.push_back('#');
      in_num = true;
      continue;
    }
    in_num = false;
    out.push_back(c);
  }
  return out;
}

struct RankSlot {
  int comm = -1;
  int rank = -1;
};

struct Proc {
  std::string host;
  int64_t pid = -1;
  std::string version;
  std::string iface, address, network;
  int64_t lines = 0;
  int64_t warnings = 0;
  std::string source;
  int current_comm = -1;           // the last communicator this process started
  std::vector<int> comms;          // in the order first seen
  std::vector<std::pair<int, RankSlot>> by_dev;  // dev -> its last rank
};

struct RankState {
  int proc = -1;
  int cuda_dev = -1;
  int nvml_dev = -1;
  std::string bus_id;
  bool started = false, complete = false, ended = false;
  double init_seconds = -1;
  int coll = -1, nvls = -1, collnet = -1, p2p = -1;
};

struct Comm {
  std::string comm_id;
  int nranks = -1;
  std::map<int, RankState> ranks;
};

struct EdgeKey {
  int proc, comm, src, dst, transport;
  bool operator==(const EdgeKey& o) const {
    return proc == o.proc && comm == o.comm && src == o.src && dst == o.dst && transport == o.transport;
  }
};
struct EdgeHash {
  size_t operator()(const EdgeKey& k) const {
    uint64_t h = static_cast<uint32_t>(k.proc);
    h = h * 1000003u ^ static_cast<uint32_t>(k.comm);
    h = h * 1000003u ^ static_cast<uint32_t>(k.src);
    h = h * 1000003u ^ static_cast<uint32_t>(k.dst);
    h = h * 1000003u ^ static_cast<uint32_t>(k.transport);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
struct Edge {
  uint64_t channels[2] = {0, 0};  // bit per channel id 0..127
  int extra_channels = 0;         // ids >= 128 (never seen in practice)
  bool gdr = false;
};

struct WarnGroup {
  WarningClass cls = WarningClass::kOther;
  int64_t count = 0;
  std::string example, location;
  std::set<int> procs;
  std::set<std::string> peers;
};

}  // namespace

struct NcclLogParser::State {
  std::vector<Proc> procs;
  std::unordered_map<std::string, int> proc_index;
  std::string last_key;
  int last_proc = -1;
  std::unordered_map<std::string, int> last_proc_by_source;
  std::string last_source;
  int last_source_proc = -1;

  std::vector<Comm> comms;
  std::unordered_map<std::string, int> comm_index;

  std::vector<std::string> transports;  // interned families
  std::vector<bool> transport_is_net;
  std::unordered_map<EdgeKey, Edge, EdgeHash> edges;

  std::map<std::string, int64_t> networks;
  std::map<std::string, int64_t> net_devices;
  std::map<std::string, std::set<std::string>> env;
  int64_t nvls_available = 0, nvls_unavailable = 0;

  std::map<std::string, WarnGroup> warnings;

  int comm_for(std::string_view comm_id, int nranks) {
    std::string key = comm_id.empty() ? "nranks=" + std::to_string(nranks) : std::string(comm_id);
    auto it = comm_index.find(key);
    if (it != comm_index.end()) return it->second;
    int idx = static_cast<int>(comms.size());
    comms.push_back(Comm{std::string(comm_id), nranks, {}});
    comm_index.emplace(std::move(key), idx);
    return idx;
  }

  int transport_for(std::string_view family) {
    for (size_t i = 0; i < transports.size(); ++i)
      if (transports[i] == family) return static_cast<int>(i);
    transports.emplace_back(family);
    return static_cast<int>(transports.size() - 1);
  }

  RankSlot* slot_for_dev(Proc& p, int dev) {
    for (auto& e : p.by_dev)
      if (e.first == dev) return &e.second;
    return p.by_dev.size() == 1 && dev < 0 ? &p.by_dev.front().second : nullptr;
  }
};

NcclLogParser::NcclLogParser() : s_(std::make_unique<State>()) {}
NcclLogParser::~NcclLogParser() = default;

void NcclLogParser::feed_line(std::string_view line, std::string_view source) {
  ++stats_.lines;
  NcclLogLine l = parse_nccl_line(line);
  if (l.kind == NcclLineKind::kNotNccl) {
    ++stats_.non_nccl_lines;
    return;
  }
  ++stats_.nccl_lines;
  on_line(l, source);
}

int NcclLogParser::process_index(const NcclLogLine& l, std::string_view source) {
  State& s = *s_;
  int idx = -1;
  if (!l.process_key.empty()) {
    if (s.last_proc >= 0 && s.last_key == l.process_key) {
      idx = s.last_proc;
    } else {
      std::string key(l.process_key);
      auto it = s.proc_index.find(key);
      if (it == s.proc_index.end()) {
        idx = static_cast<int>(s.procs.size());
        Proc p;
        p.host = std::string(l.host);
        p.pid = l.pid;
        p.source = std::string(source);
        s.procs.push_back(std::move(p));
        s.proc_index.emplace(key, idx);
      } else {
        idx = it->second;
      }
      s.last_key = std::move(key);
      s.last_proc = idx;
    }
    if (source != s.last_source) {
      s.last_proc_by_source[s.last_source] = s.last_source_proc;
      s.last_source = std::string(source);
    }
    s.last_source_proc = idx;
  } else {
    // No header (bare version line, redacted logs): the last process of this source.
    if (source == s.last_source) return s.last_source_proc;
    auto it = s.last_proc_by_source.find(std::string(source));
    return it == s.last_proc_by_source.end() ? -1 : it->second;
  }
  return idx;
}

void NcclLogParser::on_line(const NcclLogLine& l, std::string_view source) {
  State& s = *s_;
  int pi = process_index(l, source);
  Proc* p = pi >= 0 ? &s.procs[static_cast<size_t>(pi)] : nullptr;
  if (p) ++p->lines;

  switch (l.kind) {
    case NcclLineKind::kNotNccl:
      break;
    case NcclLineKind::kOther:
      ++stats_.unknown_nccl_lines;
      break;
    case NcclLineKind::kVersion:
      if (p && !l.text.empty()) p->version = strip_cuda_suffix(l.text);
      break;
    case NcclLineKind::kInitStart:
    case NcclLineKind::kInitComplete:
    case NcclLineKind::kCommEnd: {
      int ci = s.comm_for(l.comm_id, l.nranks);
      Comm& c = s.comms[static_cast<size_t>(ci)];
      if (c.nranks < 0) c.nranks = l.nranks;
      RankState& r = c.ranks[l.rank];
      if (pi >= 0) r.proc = pi;
      if (l.cuda_dev >= 0) r.cuda_dev = l.cuda_dev;
      if (l.nvml_dev >= 0) r.nvml_dev = l.nvml_dev;
      if (!l.bus_id.empty()) r.bus_id = std::string(l.bus_id);
      if (l.kind == NcclLineKind::kInitStart) r.started = true;
      if (l.kind == NcclLineKind::kInitComplete) r.started = r.complete = true;
      if (l.kind == NcclLineKind::kCommEnd) r.ended = true;
      if (p && l.kind != NcclLineKind::kCommEnd) {
        p->current_comm = ci;
        if (std::find(p->comms.begin(), p->comms.end(), ci) == p->comms.end()) p->comms.push_back(ci);
        int dev = l.dev >= 0 ? l.dev : l.cuda_dev;
        RankSlot* slot = s.slot_for_dev(*p, dev);
        if (slot) *slot = RankSlot{ci, l.rank};
        else p->by_dev.emplace_back(dev, RankSlot{ci, l.rank});
      }
      break;
    }
    case NcclLineKind::kInitTimings:
      if (p) {
        RankSlot* slot = s.slot_for_dev(*p, l.dev);
        if (slot && slot->rank == l.rank) {
          s.comms[static_cast<size_t>(slot->comm)].ranks[l.rank].init_seconds = l.total_seconds;
        } else if (p->current_comm >= 0) {
          auto& ranks = s.comms[static_cast<size_t>(p->current_comm)].ranks;
          auto it = ranks.find(l.rank);
          if (it != ranks.end()) it->second.init_seconds = l.total_seconds;
        }
      }
      break;
    case NcclLineKind::kChannelCounts:
      if (p) {
        RankSlot* slot = s.slot_for_dev(*p, l.dev);
        if (slot) {
          RankState& r = s.comms[static_cast<size_t>(slot->comm)].ranks[slot->rank];
          r.coll = l.coll_channels;
          r.nvls = l.nvls_channels;
          r.collnet = l.collnet_channels;
          r.p2p = l.p2p_channels;
        }
      }
      break;
    case NcclLineKind::kBootstrap:
      if (p) {
        p->iface = std::string(l.iface);
        p->address = std::string(l.address);
      }
      break;
    case NcclLineKind::kNetDevices:
      if (s.net_devices.size() < 256) ++s.net_devices["NET/" + std::string(l.net) + " : " + std::string(l.text)];
      break;
    case NcclLineKind::kNetNoDevice:
      break;
    case NcclLineKind::kNetwork:
      ++s.networks[std::string(l.text)];
      if (p) p->network = std::string(l.text);
      break;
    case NcclLineKind::kEnvOverride: {
      auto& values = s.env[std::string(l.env_name)];
      if (values.size() < 16) values.emplace(l.env_value);
      break;
    }
    case NcclLineKind::kRing:
      break;
    case NcclLineKind::kTransport: {
      if (l.channel < 0) break;
      int ti = s.transport_for(transport_family(l.transport));
      EdgeKey key{pi, p ? p->current_comm : -1, l.src_rank, l.dst_rank, ti};
      Edge& e = s.edges[key];
      if (l.channel < 128) e.channels[l.channel / 64] |= uint64_t{1} << (l.channel % 64);
      else ++e.extra_channels;
      if (transport_uses_gdr(l.transport)) e.gdr = true;
      break;
    }
    case NcclLineKind::kNvlsSupport:
      ++(l.flag ? s.nvls_available : s.nvls_unavailable);
      break;
    case NcclLineKind::kErrorTrace:
      ++stats_.error_traces;
      break;
    case NcclLineKind::kWarn: {
      if (p) ++p->warnings;
      WarningInfo w = classify_warning(l.message);
      std::string key(warning_class_name(w.cls));
      if (w.cls == WarningClass::kOther) key += ":" + normalize_message(l.message);
      auto it = s.warnings.find(key);
      if (it == s.warnings.end()) {
        if (s.warnings.size() >= 1024) key = "other:(more distinct warnings)";
        it = s.warnings.try_emplace(key).first;
      }
      WarnGroup& g = it->second;
      if (g.count == 0) {
        g.cls = w.cls;
        g.example = std::string(l.message.substr(0, 500));
        g.location = std::string(l.location);
      }
      ++g.count;
      if (pi >= 0 && g.procs.size() < kMaxListed) g.procs.insert(pi);
      if (!w.peer.empty() && g.peers.size() < kMaxListed) g.peers.emplace(w.peer);
      break;
    }
  }
}

namespace {

std::string proc_name(const Proc& p) { return p.host + ":" + std::to_string(p.pid); }

int popcount64(uint64_t v) {
  int n = 0;
  while (v) {
    v &= v - 1;
    ++n;
  }
  return n;
}

}  // namespace

NcclDiagnosis NcclLogParser::summarize() const {
  const State& s = *s_;
  NcclDiagnosis d;
  d.files = files_;
  d.stats = stats_;

  // Versions.
  std::map<std::string, int64_t> versions;
  for (const auto& p : s.procs)
    if (!p.version.empty()) ++versions[p.version];
  for (const auto& [v, n] : versions) d.versions.push_back({v, n});

  // Processes.
  for (const auto& p : s.procs) {
    d.processes.push_back(NcclProcessInfo{p.host, p.pid, p.version, p.iface, p.address, p.network, p.lines,
                                          p.warnings, 0, p.source});
    if (!p.iface.empty()) {
      bool dup = std::any_of(d.network.interfaces.begin(), d.network.interfaces.end(), [&](const NcclInterface& i) {
        return i.host == p.host && i.interface == p.iface && i.address == p.address;
      });
      if (!dup) d.network.interfaces.push_back({p.host, p.iface, p.address});
    }
  }

  // Communicators and ranks.
  for (const auto& c : s.comms) {
    NcclCommunicatorInfo ci;
    ci.comm_id = c.comm_id;
    ci.nranks = c.nranks;
    std::set<std::string> hosts;
    for (const auto& [rank, r] : c.ranks) {
      NcclRankInfo ri;
      ri.comm_id = c.comm_id;
      ri.rank = rank;
      ri.nranks = c.nranks;
      ri.cuda_dev = r.cuda_dev;
      ri.nvml_dev = r.nvml_dev;
      ri.bus_id = r.bus_id;
      ri.init_started = r.started;
      ri.init_complete = r.complete;
      ri.destroyed = r.ended;
      ri.init_seconds = r.init_seconds;
      ri.coll_channels = r.coll;
      ri.nvls_channels = r.nvls;
      ri.collnet_channels = r.collnet;
      ri.p2p_channels = r.p2p;
      if (r.proc >= 0) {
        ++d.processes[static_cast<size_t>(r.proc)].ranks;
        const Proc& p = s.procs[static_cast<size_t>(r.proc)];
        ri.host = p.host;
        ri.pid = p.pid;
        ri.nccl_version = p.version;
        ri.source = p.source;
        hosts.insert(p.host);
      }
      d.ranks.push_back(std::move(ri));
      if (r.complete) ci.ranks_complete.push_back(rank);
      else if (r.started) ci.ranks_started_not_complete.push_back(rank);
    }
    // 64-bit: a corrupted line saturates its rank at INT_MAX, and one past it must not overflow.
    int64_t upper = c.nranks;
    if (!c.ranks.empty()) upper = std::max<int64_t>(upper, int64_t{c.ranks.rbegin()->first} + 1);
    upper = std::min<int64_t>(upper, 1 << 20);  // a corrupted nranks must not allocate the world
    for (int r = 0; r < upper; ++r) {
      auto it = c.ranks.find(r);
      if (it == c.ranks.end() || !it->second.complete) ci.ranks_missing.push_back(r);
      if (it == c.ranks.end()) ci.ranks_not_seen.push_back(r);
    }
    ci.hosts.assign(hosts.begin(), hosts.end());
    d.communicators.push_back(std::move(ci));
  }

  // Transports: merge the sender's and the receiver's view of each rank pair.
  struct LinkKey {
    int comm, src, dst, transport;
    bool operator<(const LinkKey& o) const {
      return std::tie(comm, src, dst, transport) < std::tie(o.comm, o.src, o.dst, o.transport);
    }
  };
  std::map<LinkKey, Edge> links;
  for (const auto& [k, e] : s.edges) {
    int comm = k.comm;
    if (comm < 0 && k.proc >= 0) {
      const Proc& p = s.procs[static_cast<size_t>(k.proc)];
      if (!p.comms.empty()) comm = p.comms.front();  // older NCCL: init lines come after the channels
    }
    Edge& m = links[LinkKey{comm, k.src, k.dst, k.transport}];
    m.channels[0] |= e.channels[0];
    m.channels[1] |= e.channels[1];
    m.extra_channels = std::max(m.extra_channels, e.extra_channels);
    m.gdr = m.gdr || e.gdr;
  }
  auto host_of = [&](int comm, int rank) -> std::string {
    if (comm < 0) return {};
    const auto& ranks = s.comms[static_cast<size_t>(comm)].ranks;
    auto it = ranks.find(rank);
    if (it == ranks.end() || it->second.proc < 0) return {};
    return s.procs[static_cast<size_t>(it->second.proc)].host;
  };
  struct HostKey {
    std::string src, dst, transport;
    bool operator<(const HostKey& o) const {
      return std::tie(src, dst, transport) < std::tie(o.src, o.dst, o.transport);
    }
  };
  std::map<HostKey, NcclHostLink> host_links;
  for (const auto& [k, e] : links) {
    NcclTransportLink t;
    t.comm_id = k.comm >= 0 ? s.comms[static_cast<size_t>(k.comm)].comm_id : std::string();
    t.src_rank = k.src;
    t.dst_rank = k.dst;
    t.src_host = host_of(k.comm, k.src);
    t.dst_host = host_of(k.comm, k.dst);
    t.transport = s.transports[static_cast<size_t>(k.transport)];
    t.channels = popcount64(e.channels[0]) + popcount64(e.channels[1]) + e.extra_channels;
    t.gdr = e.gdr;
    NcclHostLink& h = host_links[HostKey{t.src_host, t.dst_host, t.transport}];
    h.src_host = t.src_host;
    h.dst_host = t.dst_host;
    h.transport = t.transport;
    ++h.rank_pairs;
    h.channels += t.channels;
    h.gdr = h.gdr || t.gdr;
    d.transports.push_back(std::move(t));
  }
  for (auto& [k, h] : host_links) d.host_links.push_back(std::move(h));

  // Network.
  std::vector<std::pair<std::string, int64_t>> nets(s.networks.begin(), s.networks.end());
  std::stable_sort(nets.begin(), nets.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& n : nets) d.network.in_use.push_back(n.first);
  for (const auto& [dev, n] : s.net_devices) d.network.devices.push_back(dev);
  for (const auto& [name, values] : s.env) d.network.env[name].assign(values.begin(), values.end());
  d.network.nvls_available = s.nvls_available;
  d.network.nvls_unavailable = s.nvls_unavailable;

  // Warnings, most frequent first; a version mismatch is one too.
  std::unordered_map<std::string, std::string> host_by_address;
  for (const auto& p : s.procs)
    if (!p.address.empty()) host_by_address.emplace(p.address, p.host);
  for (const auto& [key, g] : s.warnings) {
    NcclWarningGroup w;
    w.cls = std::string(warning_class_name(g.cls));
    w.count = g.count;
    w.hint = std::string(warning_hint(g.cls));
    w.example = g.example;
    w.location = g.location;
    for (int pi : g.procs) w.processes.push_back(proc_name(s.procs[static_cast<size_t>(pi)]));
    std::set<std::string> peer_hosts;
    for (const auto& peer : g.peers) {
      w.peers.push_back(peer);
      auto it = host_by_address.find(peer);
      if (it != host_by_address.end()) peer_hosts.insert(it->second);
      else if (std::any_of(s.procs.begin(), s.procs.end(), [&](const Proc& p) { return p.host == peer; }))
        peer_hosts.insert(peer);
    }
    w.peer_hosts.assign(peer_hosts.begin(), peer_hosts.end());
    d.warnings.push_back(std::move(w));
  }
  if (versions.size() > 1) {
    NcclWarningGroup w;
    w.cls = std::string(warning_class_name(WarningClass::kVersionMismatch));
    w.hint = std::string(warning_hint(WarningClass::kVersionMismatch));
    std::string ex = "NCCL versions differ between processes:";
    for (const auto& [v, n] : versions) ex += " " + v + " (" + std::to_string(n) + ")";
    w.example = ex;
    std::string minority = std::min_element(versions.begin(), versions.end(), [](const auto& a, const auto& b) {
                             return a.second < b.second;
                           })->first;
    for (const auto& p : s.procs) {
      if (p.version != minority) continue;
      ++w.count;
      if (w.processes.size() < kMaxListed) w.processes.push_back(proc_name(p));
    }
    d.warnings.push_back(std::move(w));
  }
  std::stable_sort(d.warnings.begin(), d.warnings.end(),
                   [](const NcclWarningGroup& a, const NcclWarningGroup& b) { return a.count > b.count; });
  return d;
}

}  // namespace ddp::nccl
