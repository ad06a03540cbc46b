// Single-line parsing of NCCL debug output (launcher/src/nccl/nccl_log_line.h)
// across versions 2.12 ... 2.28, and robustness on truncated/corrupted lines.

#include <gtest/gtest.h>

#include <string>

#include "nccl/nccl_log_line.h"
#include "nccl/nccl_warning.h"

namespace ddp::nccl {
namespace {

TEST(NcclLogLine, InitCompleteWithCommId) {
  auto l = parse_nccl_line(
      "hostname-test:980:1265 [0] NCCL INFO comm 0x55986b8b8560 rank 32 nranks 64 cudaDev 0 nvmlDev 0 busId 18000 "
      "commId 0x5ae77eb5ea4ec1ee - Init COMPLETE");
  EXPECT_EQ(l.kind, NcclLineKind::kInitComplete);
  EXPECT_EQ(l.level, NcclLevel::kInfo);
  EXPECT_EQ(l.host, "hostname-test");
  EXPECT_EQ(l.pid, 980);
  EXPECT_EQ(l.tid, 1265);
  EXPECT_EQ(l.dev, 0);
  EXPECT_EQ(l.process_key, "hostname-test:980");
  EXPECT_EQ(l.comm_ptr, "0x55986b8b8560");
  EXPECT_EQ(l.rank, 32);
  EXPECT_EQ(l.nranks, 64);
  EXPECT_EQ(l.cuda_dev, 0);
  EXPECT_EQ(l.nvml_dev, 0);
  EXPECT_EQ(l.bus_id, "18000");
  EXPECT_EQ(l.comm_id, "0x5ae77eb5ea4ec1ee");
}

TEST(NcclLogLine, OldInitCompleteWithoutCommIdOrNvmlDev) {
  auto l = parse_nccl_line(
      "A03-R28-I49-3-9000018:193027:193119 [7] NCCL INFO comm 0x7fdf08000d00 rank 15 nranks 16 cudaDev 7 busId e7000 "
      "- Init COMPLETE");
  EXPECT_EQ(l.kind, NcclLineKind::kInitComplete);
  EXPECT_EQ(l.host, "A03-R28-I49-3-9000018");
  EXPECT_EQ(l.rank, 15);
  EXPECT_EQ(l.nranks, 16);
  EXPECT_EQ(l.cuda_dev, 7);
  EXPECT_EQ(l.nvml_dev, -1);
  EXPECT_EQ(l.bus_id, "e7000");
  EXPECT_TRUE(l.comm_id.empty());
}

TEST(NcclLogLine, InitStartWithApiName) {
  auto l = parse_nccl_line(
      "box:7300:7350 [0] NCCL INFO ncclCommInitRankConfig comm 0x57a7c7b82cf0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 "
      "busId 1a000 commId 0xdf5506ed2c65f234 - Init START");
  EXPECT_EQ(l.kind, NcclLineKind::kInitStart);
  EXPECT_EQ(l.init_api, "ncclCommInitRankConfig");
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.nranks, 8);
  EXPECT_EQ(l.comm_id, "0xdf5506ed2c65f234");
}

TEST(NcclLogLine, VersionInfoAndBare) {
  auto a = parse_nccl_line("host-2:38610:38610 [0] NCCL INFO NCCL version 2.18.3+cuda12.2");
  EXPECT_EQ(a.kind, NcclLineKind::kVersion);
  EXPECT_EQ(a.text, "2.18.3+cuda12.2");
  auto b = parse_nccl_line("NCCL version 2.13.4+cuda11.7");
  EXPECT_EQ(b.kind, NcclLineKind::kVersion);
  EXPECT_EQ(b.text, "2.13.4+cuda11.7");
  EXPECT_EQ(b.pid, -1);
}

TEST(NcclLogLine, BootstrapOldAndNewSpelling) {
  auto a = parse_nccl_line("4c217144f0b1:113168:113168 [0] NCCL INFO Bootstrap : Using eth0:10.0.1.9<0>");
  EXPECT_EQ(a.kind, NcclLineKind::kBootstrap);
  EXPECT_EQ(a.iface, "eth0");
  EXPECT_EQ(a.address, "10.0.1.9");
  auto b = parse_nccl_line("vm:10295:10295 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>");  // 2.28.9, captured
  EXPECT_EQ(b.kind, NcclLineKind::kBootstrap);
  EXPECT_EQ(b.iface, "eth0");
  EXPECT_EQ(b.address, "192.0.2.2");
}

TEST(NcclLogLine, EnvOverridesAndNetwork) {
  auto a = parse_nccl_line("host-2:38610:38610 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to enp179s0f0");
  EXPECT_EQ(a.kind, NcclLineKind::kEnvOverride);
  EXPECT_EQ(a.env_name, "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(a.env_value, "enp179s0f0");
  auto b = parse_nccl_line("user:5183:5236 [4] NCCL INFO NCCL_IB_DISABLE set by environment to 0.");
  EXPECT_EQ(b.env_value, "0");
  auto c = parse_nccl_line("host-2:38610:38610 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0");
  EXPECT_EQ(c.env_name, "NCCL_IB_HCA");
  EXPECT_EQ(c.env_value, "mlx5_0");
  auto d = parse_nccl_line("host-2:38610:38610 [0] NCCL INFO Using network IB");
  EXPECT_EQ(d.kind, NcclLineKind::kNetwork);
  EXPECT_EQ(d.text, "IB");
  auto e = parse_nccl_line(
      "host-2:38610:38610 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB enp179s0f0:198.18.2.2<0>");
  EXPECT_EQ(e.kind, NcclLineKind::kNetDevices);
  EXPECT_EQ(e.net, "IB");
  EXPECT_EQ(e.text, "[0]mlx5_0:1/RoCE [RO]; OOB enp179s0f0:198.18.2.2<0>");
  auto f = parse_nccl_line("box:1:1 [0] NCCL INFO NET/IB : No device found.");
  EXPECT_EQ(f.kind, NcclLineKind::kNetNoDevice);
}

TEST(NcclLogLine, TransportsOfEveryKind) {
  struct Case {
    const char* line;
    int channel, src, dst;
    const char* family;
    TransportDirection dir;
    bool gdr;
  };
  const Case cases[] = {
      {"hw14:798:813 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/direct pointer", 2, 3, 4, "P2P/direct pointer",
       TransportDirection::kNone, false},
      {"h:5670:5810 [7] NCCL INFO Channel 14/0 : 7[7] -> 0[0] via P2P/CUMEM", 14, 7, 0, "P2P/CUMEM",
       TransportDirection::kNone, false},
      {"c:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read", 1, 8, 15, "P2P/IPC",
       TransportDirection::kNone, false},
      {"[2] node0:13572:13572 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct", 0, 2, 0, "SHM",
       TransportDirection::kNone, false},
      {"c:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3", 3, 15, 6, "NET/Socket",
       TransportDirection::kSend, false},
      {"h:987:1260 [7] NCCL INFO Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2", 3, 47, 39,
       "NET/IBext_v8", TransportDirection::kReceive, false},
      {"d:1050:1315 [0] NCCL INFO Channel 03/0 : 0[90000] -> 1[1000] [send] via NET/IB/3/GDRDMA", 3, 0, 1, "NET/IB",
       TransportDirection::kSend, true},
      {"g:1:2 [0] NCCL INFO Channel 05/0 : 0[0] -> 1[1] via NVLS", 5, 0, 1, "NVLS", TransportDirection::kNone, false},
      {"g:1:2 [0] NCCL INFO CollNet 00/0 : 0 [receive] via COLLNET/SHARP/0/GDRDMA", 0, 0, 0, "COLLNET/SHARP",
       TransportDirection::kReceive, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    auto l = parse_nccl_line(c.line);
    ASSERT_EQ(l.kind, NcclLineKind::kTransport);
    EXPECT_EQ(l.channel, c.channel);
    EXPECT_EQ(l.src_rank, c.src);
    EXPECT_EQ(l.dst_rank, c.dst);
    EXPECT_EQ(transport_family(l.transport), c.family);
    EXPECT_EQ(l.direction, c.dir);
    EXPECT_EQ(transport_uses_gdr(l.transport), c.gdr);
  }
  auto old = parse_nccl_line("d:1050:1315 [0] NCCL INFO Channel 03/0 : 0[90000] -> 1[1000] [send] via NET/Socket/3");
  EXPECT_EQ(old.src_dev, "90000");
  EXPECT_EQ(old.dst_dev, "1000");
}

TEST(NcclLogLine, RingsCountsTimingsNvls) {
  auto ring = parse_nccl_line("w-0:5663:5712 [0] NCCL INFO Channel 01/16 :    0   8  15  14  13  12  11  10");
  EXPECT_EQ(ring.kind, NcclLineKind::kRing);
  EXPECT_EQ(ring.channel, 1);
  EXPECT_EQ(ring.nchannels, 16);
  auto counts = parse_nccl_line(
      "h:983:1261 [3] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, 1 p2p "
      "channels per peer");
  EXPECT_EQ(counts.kind, NcclLineKind::kChannelCounts);
  EXPECT_EQ(counts.coll_channels, 16);
  EXPECT_EQ(counts.collnet_channels, 0);
  EXPECT_EQ(counts.nvls_channels, 16);
  EXPECT_EQ(counts.p2p_channels, 16);
  auto t1 = parse_nccl_line(
      "m:128794:128851 [0] NCCL INFO Init timings: rank 5 nranks 8 total 2.46 (kernels 0.18, bootstrap 1.60)");
  EXPECT_EQ(t1.kind, NcclLineKind::kInitTimings);
  EXPECT_EQ(t1.rank, 5);
  EXPECT_EQ(t1.nranks, 8);
  EXPECT_DOUBLE_EQ(t1.total_seconds, 2.46);
  auto t2 = parse_nccl_line(
      "b:1:2 [1] NCCL INFO Init timings - ncclCommInitRankConfig: rank 1 nranks 2 total 0.81 (kernels 0.08)");
  EXPECT_EQ(t2.kind, NcclLineKind::kInitTimings);
  EXPECT_EQ(t2.rank, 1);
  EXPECT_DOUBLE_EQ(t2.total_seconds, 0.81);
  auto nv = parse_nccl_line("j:5668:5722 [5] NCCL INFO NVLS multicast support is available on dev 5");
  EXPECT_EQ(nv.kind, NcclLineKind::kNvlsSupport);
  EXPECT_TRUE(nv.flag);
  auto nv2 = parse_nccl_line("a:18062:18131 [5] NCCL INFO NVLS multicast support is not available on dev 5");
  EXPECT_FALSE(nv2.flag);
}

TEST(NcclLogLine, WarnWithTimestampLocationAndErrorTrace) {
  // Captured from NCCL 2.28.9 (tests/unit/fixtures/nccl/real_2.28.9).
  auto w = parse_nccl_line(
      "[2026-12-02 18:47:53] vm:10299:10299 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found");
  EXPECT_EQ(w.kind, NcclLineKind::kWarn);
  EXPECT_EQ(w.host, "vm");
  EXPECT_EQ(w.pid, 10299);
  EXPECT_EQ(w.location, "bootstrap.cc:114");
  EXPECT_EQ(w.message, "Bootstrap : no socket interface found");
  EXPECT_EQ(classify_warning(w.message).cls, WarningClass::kInterfaceNotFound);

  auto t = parse_nccl_line("vm:10299:10299 [0] NCCL INFO init.cc:126 -> 5");
  EXPECT_EQ(t.kind, NcclLineKind::kErrorTrace);
  EXPECT_EQ(t.location, "init.cc:126");
  EXPECT_EQ(t.error_code, 5);
}

TEST(NcclLogLine, PrefixesAreSkipped) {
  auto a = parse_nccl_line(
      "[1,3]<stdout>:aiplatform-wlf2-ge78-70:102987:102996 [1] NCCL INFO P2P Chunksize set to 131072");
  EXPECT_EQ(a.kind, NcclLineKind::kOther);
  EXPECT_EQ(a.host, "aiplatform-wlf2-ge78-70");
  EXPECT_EQ(a.pid, 102987);
  auto b = parse_nccl_line(
      "2025-11-12 20:42:20,261 - INFO - g340-cd51:4450:4887 [5] NCCL INFO Channel 31/1 : 5[5] -> 0[0] via P2P/IPC");
  EXPECT_EQ(b.kind, NcclLineKind::kTransport);
  EXPECT_EQ(b.host, "g340-cd51");
  EXPECT_EQ(b.channel, 31);
  auto c = parse_nccl_line(
      "rdma-gpu-train-worker-0: rdma-gpu-train-worker-0:19488:21063 [4] NCCL INFO Using network IBext");
  EXPECT_EQ(c.host, "rdma-gpu-train-worker-0");
  EXPECT_EQ(c.text, "IBext");
  auto crlf = parse_nccl_line("h:1:2 [0] NCCL INFO Using network Socket\r");
  EXPECT_EQ(crlf.text, "Socket");
}

TEST(NcclLogLine, NotNcclAndUnknown) {
  EXPECT_EQ(parse_nccl_line("").kind, NcclLineKind::kNotNccl);
  EXPECT_EQ(parse_nccl_line("epoch 3 loss 0.25").kind, NcclLineKind::kNotNccl);
  EXPECT_EQ(parse_nccl_line("NCCLX INFO foo").kind, NcclLineKind::kNotNccl);
  EXPECT_EQ(parse_nccl_line("h:1:2 [0] NCCL INFO Connected all rings").kind, NcclLineKind::kOther);
}

TEST(NcclLogLine, TruncatedAndCorruptedLinesNeverCrash) {
  const std::string full =
      "[2026-12-02 18:47:53] hostname-test:980:1265 [0] NCCL INFO ncclCommInitRank comm 0x55986b8b8560 rank 32 "
      "nranks 64 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE";
  for (size_t n = 0; n <= full.size(); ++n) {
    auto l = parse_nccl_line(std::string_view(full).substr(0, n));
    if (l.kind == NcclLineKind::kInitComplete) {
      EXPECT_EQ(n, full.size());
    }
  }
  for (size_t n = 0; n <= full.size(); ++n) (void)parse_nccl_line(std::string_view(full).substr(n));
  const std::string channel = "c:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3";
  for (size_t n = 0; n <= channel.size(); ++n) {
    auto l = parse_nccl_line(std::string_view(channel).substr(0, n));
    if (l.kind == NcclLineKind::kTransport) {
      EXPECT_EQ(l.src_rank, 15);
      EXPECT_EQ(l.dst_rank, 6);
    }
  }
  // Corrupted: bytes flipped, absurd numbers, NUL bytes.
  std::string bad = channel;
  bad[40] = '\0';
  (void)parse_nccl_line(bad);
  auto huge = parse_nccl_line(
      "h:99999999999999999999:1 [99999999999] NCCL INFO comm 0x1 rank 99999999999 nranks -3 cudaDev x busId - Init "
      "COMPLETE");
  EXPECT_EQ(huge.kind, NcclLineKind::kInitComplete);
  EXPECT_GE(huge.rank, 0);
  auto half = parse_nccl_line("h:1:2 [0] NCCL INFO comm 0x1 - Init COMPLETE");
  EXPECT_EQ(half.kind, NcclLineKind::kOther);
  (void)parse_nccl_line("NCCL INFO");
  (void)parse_nccl_line("NCCL WARN");
  (void)parse_nccl_line("] NCCL INFO Channel : -> via ");
  (void)parse_nccl_line("h:1:2 [0] NCCL INFO Channel 00/ : 1[ -> 2[");
}

TEST(NcclWarning, ClassesPeersAndHints) {
  auto ib = classify_warning(
      "NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536 vendor err 129 "
      "(Recv)");
  EXPECT_EQ(ib.cls, WarningClass::kIbCompletion);
  EXPECT_EQ(ib.peer, "172.36.143.59");
  EXPECT_EQ(ib.status, 12);
  auto ib_old = classify_warning("NET/IB : Got completion from peer 10.0.0.5<1> with error 12, opcode 0, len 0");
  EXPECT_EQ(ib_old.status, 12);
  auto closed = classify_warning("socketProgress: Connection closed by remote peer node2<42830>");
  EXPECT_EQ(closed.cls, WarningClass::kConnectionClosed);
  EXPECT_EQ(closed.peer, "node2");
  auto net_closed = classify_warning("Net : Connection closed by remote peer 10.104.148.191<37877>");
  EXPECT_EQ(net_closed.peer, "10.104.148.191");
  EXPECT_EQ(classify_warning("socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection "
                             "abort")
                .cls,
            WarningClass::kConnectFailed);
  EXPECT_EQ(classify_warning("Cuda failure 'out of memory'").cls, WarningClass::kCuda);
  EXPECT_EQ(classify_warning("Proxy Call to rank 14 failed (Connect)").cls, WarningClass::kProxy);
  EXPECT_EQ(classify_warning("something new").cls, WarningClass::kOther);
  EXPECT_NE(warning_hint(WarningClass::kInterfaceNotFound).find("NCCL_SOCKET_IFNAME"), std::string_view::npos);
  EXPECT_NE(warning_hint(WarningClass::kIbCompletion).find("NCCL_IB_TIMEOUT"), std::string_view::npos);
  EXPECT_NE(warning_hint(WarningClass::kConnectionClosed).find("died first"), std::string_view::npos);
  EXPECT_EQ(warning_class_name(WarningClass::kVersionMismatch), "version_mismatch");
}

}  // namespace
}  // namespace ddp::nccl
