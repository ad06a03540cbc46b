// Aggregation of NCCL logs into an NcclDiagnosis (nccl_log_parser.h,
// nccl_log_files.h) on the fixtures in tests/unit/fixtures/nccl.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nccl/nccl_diagnosis.h"
#include "nccl/nccl_log_files.h"
#include "nccl/nccl_log_parser.h"

#ifndef DDP_NCCL_FIXTURES
#error "DDP_NCCL_FIXTURES must name tests/unit/fixtures/nccl"
#endif

namespace ddp::nccl {
namespace {

std::string fixture(const std::string& name) { return std::string(DDP_NCCL_FIXTURES) + "/" + name; }

const NcclRankInfo* find_rank(const NcclDiagnosis& d, int rank, const std::string& comm_id = {}) {
  for (const auto& r : d.ranks)
    if (r.rank == rank && (comm_id.empty() || r.comm_id == comm_id)) return &r;
  return nullptr;
}

const NcclWarningGroup* find_warning(const NcclDiagnosis& d, const std::string& cls) {
  for (const auto& w : d.warnings)
    if (w.cls == cls) return &w;
  return nullptr;
}

const NcclTransportLink* find_link(const NcclDiagnosis& d, int src, int dst, const std::string& transport) {
  for (const auto& t : d.transports)
    if (t.src_rank == src && t.dst_rank == dst && t.transport == transport) return &t;
  return nullptr;
}

TEST(NcclDiagnosis, JobDirWithHangAtInit) {
  auto d = diagnose_paths({fixture("job_hang")});
  // nccl.log of 4 ranks and one stdout.log without NCCL lines.
  EXPECT_EQ(d.files.size(), 5u);
  EXPECT_EQ(d.processes.size(), 4u);
  ASSERT_EQ(d.versions.size(), 1u);
  EXPECT_EQ(d.versions[0].version, "2.24.3");
  ASSERT_EQ(d.communicators.size(), 1u);
  const auto& c = d.communicators[0];
  EXPECT_EQ(c.comm_id, "0x9ad9b5e4ab2566da");
  EXPECT_EQ(c.nranks, 4);
  EXPECT_TRUE(c.ranks_complete.empty());
  EXPECT_EQ(c.ranks_missing, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.ranks_started_not_complete, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(c.ranks_not_seen, (std::vector<int>{3}));
  EXPECT_EQ(c.hosts, (std::vector<std::string>{"gpu-a", "gpu-b"}));
  const auto* r2 = find_rank(d, 2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->host, "gpu-b");
  EXPECT_EQ(r2->pid, 5201);
  EXPECT_EQ(r2->cuda_dev, 0);
  EXPECT_EQ(r2->bus_id, "18000");
  EXPECT_TRUE(r2->init_started);
  EXPECT_FALSE(r2->init_complete);
  ASSERT_EQ(d.network.in_use.size(), 1u);
  EXPECT_EQ(d.network.in_use[0], "Socket");
  EXPECT_EQ(d.network.env.at("NCCL_SOCKET_IFNAME"), (std::vector<std::string>{"eth0"}));
  EXPECT_TRUE(d.warnings.empty());

  // rank_3's process logged NCCL lines but never started init.
  const auto idle =
      std::find_if(d.processes.begin(), d.processes.end(), [](const NcclProcessInfo& p) { return p.ranks == 0; });
  ASSERT_NE(idle, d.processes.end());
  EXPECT_EQ(idle->host, "gpu-b");
  EXPECT_EQ(idle->pid, 5202);
  EXPECT_NE(idle->source.find("rank_3/nccl.log"), std::string::npos);

  std::string text = render_text(d);
  EXPECT_NE(text.find("likely culprits of a hang at init: ranks 3"), std::string::npos) << text;
}

TEST(NcclDiagnosis, JobDirCompleteWithTimingsAndCumem) {
  auto d = diagnose_paths({fixture("job_ok")});
  ASSERT_EQ(d.communicators.size(), 1u);
  EXPECT_EQ(d.communicators[0].ranks_complete, (std::vector<int>{0, 1}));
  EXPECT_TRUE(d.communicators[0].ranks_missing.empty());
  const auto* r1 = find_rank(d, 1);
  ASSERT_NE(r1, nullptr);
  EXPECT_TRUE(r1->init_complete);
  EXPECT_DOUBLE_EQ(r1->init_seconds, 0.81);
  EXPECT_EQ(r1->coll_channels, 2);
  EXPECT_EQ(r1->nvls_channels, 0);
  const auto* link = find_link(d, 0, 1, "P2P/CUMEM");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->channels, 2);
  EXPECT_EQ(link->src_host, "box");
  EXPECT_EQ(link->dst_host, "box");
  ASSERT_EQ(d.host_links.size(), 1u);
  EXPECT_EQ(d.host_links[0].rank_pairs, 2);
  EXPECT_EQ(d.network.nvls_unavailable, 2);
}

TEST(NcclDiagnosis, Nccl212WithoutCommIdResolvesTransportsAfterInit) {
  auto d = diagnose_paths({fixture("nccl_2.12_ib_16ranks.log")});
  ASSERT_EQ(d.communicators.size(), 1u);
  const auto& c = d.communicators[0];
  EXPECT_TRUE(c.comm_id.empty());
  EXPECT_EQ(c.nranks, 16);
  EXPECT_EQ(c.ranks_complete, (std::vector<int>{0, 1, 7, 8, 15}));
  EXPECT_EQ(c.ranks_missing.size(), 11u);
  // The bare version line comes first in the file: no process to credit it to.
  EXPECT_TRUE(d.versions.empty());
  const auto* ib = find_link(d, 15, 0, "NET/IB");
  ASSERT_NE(ib, nullptr);
  EXPECT_EQ(ib->channels, 2);  // [send] on nodeB and [receive] on nodeA merge
  EXPECT_TRUE(ib->gdr);
  EXPECT_EQ(ib->src_host, "nodeB");
  EXPECT_EQ(ib->dst_host, "nodeA");
  const auto* ipc = find_link(d, 0, 1, "P2P/IPC");
  ASSERT_NE(ipc, nullptr);
  EXPECT_EQ(ipc->src_host, "nodeA");
  ASSERT_FALSE(d.network.in_use.empty());
  EXPECT_EQ(d.network.in_use[0], "IB");
  ASSERT_EQ(d.network.devices.size(), 2u);  // same HCAs, one OOB address per node
  EXPECT_NE(d.network.devices[0].find("mlx5_0:1/IB"), std::string::npos);
}

TEST(NcclDiagnosis, ConnectionClosedNamesThePeerHost) {
  auto d = diagnose_paths({fixture("nccl_2.13_conn_closed.log")});
  ASSERT_EQ(d.versions.size(), 1u);
  EXPECT_EQ(d.versions[0].version, "2.13.4");  // bare line credited to hostx, the last process seen
  const auto* w = find_warning(d, "connection_closed_by_peer");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->count, 2);
  EXPECT_EQ(w->peers, (std::vector<std::string>{"10.0.1.7"}));
  EXPECT_EQ(w->peer_hosts, (std::vector<std::string>{"hosty"}));
  EXPECT_EQ(w->processes, (std::vector<std::string>{"hostx:113168"}));
  EXPECT_NE(w->hint.find("died first"), std::string::npos);
  const auto* proxy = find_warning(d, "proxy_failure");
  ASSERT_NE(proxy, nullptr);
  EXPECT_EQ(proxy->count, 2);
  EXPECT_EQ(d.stats.error_traces, 3);
}

TEST(NcclDiagnosis, IbCompletionErrorsAndNvls) {
  auto d = diagnose_paths({fixture("nccl_2.21_ib_completion.log")});
  const auto* w = find_warning(d, "ib_completion_error");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->count, 2);
  EXPECT_NE(w->hint.find("NCCL_IB_TIMEOUT"), std::string::npos);
  EXPECT_NE(std::find(w->peers.begin(), w->peers.end(), "172.36.143.59"), w->peers.end());
  const auto* r32 = find_rank(d, 32, "0x5ae77eb5ea4ec1ee");
  ASSERT_NE(r32, nullptr);
  EXPECT_EQ(r32->nvls_channels, 16);
  EXPECT_EQ(r32->nccl_version, "2.21.5");
  EXPECT_EQ(d.network.nvls_available, 1);
  EXPECT_EQ(d.network.in_use, (std::vector<std::string>{"IBext_v8"}));
  EXPECT_EQ(d.network.env.at("NCCL_IB_HCA"), (std::vector<std::string>{"mlx5_0,mlx5_1"}));
  const auto* net = find_link(d, 0, 32, "NET/IBext_v8");
  ASSERT_NE(net, nullptr);
  EXPECT_EQ(net->channels, 2);
  EXPECT_TRUE(net->gdr);
}

TEST(NcclDiagnosis, PrefixedSocketLogWithShmAndClosedPeer) {
  auto d = diagnose_paths({fixture("nccl_2.19_socket_prefixed.log")});
  ASSERT_EQ(d.communicators.size(), 1u);
  EXPECT_EQ(d.communicators[0].ranks_complete, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(d.communicators[0].ranks_started_not_complete, (std::vector<int>{1}));
  const auto* shm = find_link(d, 1, 0, "SHM");
  ASSERT_NE(shm, nullptr);
  EXPECT_EQ(shm->src_host, "node0");
  const auto* sock = find_link(d, 0, 2, "NET/Socket");
  ASSERT_NE(sock, nullptr);
  EXPECT_EQ(sock->dst_host, "node2");
  EXPECT_EQ(sock->channels, 2);
  ASSERT_NE(find_link(d, 3, 2, "P2P/direct pointer"), nullptr);
  const auto* w = find_warning(d, "connection_closed_by_peer");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->peer_hosts, (std::vector<std::string>{"node2"}));
}

TEST(NcclDiagnosis, RealNccl228Capture) {
  auto d = diagnose_paths({fixture("real_2.28.9")});
  EXPECT_EQ(d.processes.size(), 3u);
  EXPECT_TRUE(d.communicators.empty());
  const auto* w = find_warning(d, "interface_not_found");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->count, 1);
  EXPECT_EQ(w->location, "bootstrap.cc:114");
  const auto* cuda = find_warning(d, "cuda_failure");
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->count, 6);
  EXPECT_EQ(d.network.env.at("NCCL_SOCKET_IFNAME"), (std::vector<std::string>{"lo", "nonexistent0"}));
  bool lo = false;
  for (const auto& i : d.network.interfaces) lo = lo || (i.interface == "lo" && i.address == "127.0.0.1");
  EXPECT_TRUE(lo);
}

TEST(NcclDiagnosis, VersionMismatchBetweenProcesses) {
  auto d = diagnose_paths({fixture("nccl_2.13_conn_closed.log"), fixture("nccl_2.21_ib_completion.log")});
  ASSERT_EQ(d.versions.size(), 2u);
  const auto* w = find_warning(d, "version_mismatch");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->example.find("2.13.4"), std::string::npos);
  EXPECT_NE(w->example.find("2.21.5"), std::string::npos);
}

TEST(NcclDiagnosis, JsonHasTheDocumentedKeys) {
  auto j = to_json(diagnose_paths({fixture("job_hang")}));
  for (const char* k : {"communicators", "ranks", "transports", "warnings", "network", "versions", "processes"})
    EXPECT_TRUE(j.contains(k)) << k;
  const auto& c = j["communicators"][0];
  EXPECT_EQ(c["comm_id"], "0x9ad9b5e4ab2566da");
  EXPECT_EQ(c["nranks"], 4);
  EXPECT_EQ(c["ranks_missing"].size(), 4u);
  EXPECT_TRUE(c["ranks_complete"].empty());
  const auto& r = j["ranks"][0];
  for (const char* k : {"host", "pid", "rank", "nranks", "cuda_dev", "bus_id", "init_complete"})
    EXPECT_TRUE(r.contains(k)) << k;
  EXPECT_EQ(r["host"], "gpu-a");
  EXPECT_EQ(r["init_complete"], false);
}

TEST(NcclDiagnosis, IncrementalFeedAndGarbage) {
  NcclLogParser p;
  p.feed_line("random text", "a");
  p.feed_line("\x01\x02\xff NCCL INFO", "a");
  p.feed_line("h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE", "a");
  p.feed_line("h:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 2000 - Init START", "b");
  p.feed_line("h:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 20", "b");  // truncated
  auto d = p.summarize();
  EXPECT_EQ(d.stats.lines, 5);
  EXPECT_EQ(d.stats.non_nccl_lines, 1);
  ASSERT_EQ(d.communicators.size(), 1u);
  EXPECT_EQ(d.communicators[0].ranks_complete, (std::vector<int>{0}));
  EXPECT_EQ(d.communicators[0].ranks_missing, (std::vector<int>{1}));
}

TEST(NcclDiagnosis, ARankSaturatedAtIntMaxDoesNotOverflow) {
  // Found by the fuzzer: a rank too long for an int is read as INT_MAX; listing the
  // missing ranks up to one past it overflowed.
  NcclLogParser p;
  p.feed_line("h:1:1 [1] NCCL INFO comm 0x1 rank 1" + std::string(60, '6') +
                  " nranks 4 cudaDev 1 busId 2000 commId 0x7b - Init START",
              "a");
  auto d = p.summarize();
  ASSERT_EQ(d.communicators.size(), 1u);
  EXPECT_EQ(d.communicators[0].nranks, 4);
  EXPECT_EQ(d.communicators[0].ranks_missing.size(), size_t{1} << 20);  // capped, not the world
  EXPECT_EQ(d.communicators[0].ranks_missing.front(), 0);
}

TEST(NcclDiagnosis, MissingPathIsAnInputError) {
  EXPECT_THROW(diagnose_paths({fixture("does_not_exist")}), DiagnoseInputError);
}

}  // namespace
}  // namespace ddp::nccl
