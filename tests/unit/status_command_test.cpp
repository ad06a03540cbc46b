// `ddplaunch status` rendering: the table made from a coordinator's health
// view (CoordinatorJob::status_json), for each rank state.
#include "cli/status_command.h"

#include <gtest/gtest.h>

#include "text_lines.h"

#include <sstream>
#include <string>
#include <vector>

namespace ddp {
namespace {

using ddp::testing::lines;

nlohmann::json rank(int r, double age, nlohmann::json open = nlohmann::json::array()) {
  return {{"rank", r},        {"monitored", true}, {"host", "node-a"}, {"pid", 100 + r},
          {"step", 41},       {"phase", "backward"}, {"step_seconds", 0.0125}, {"heartbeat_age_s", age},
          {"exited", false},  {"open_collectives", open}};
}

TEST(StatusCommand, RendersTheJobAndEveryRank) {
  nlohmann::json s = {{"job_id", "j1"}, {"generation", 2}, {"state", "running"}, {"restarts_used", 2},
                      {"max_restarts", 3}, {"elapsed_s", 75.25}, {"world_size", 4}, {"nnodes", 1}};
  s["ranks"] = {{"hang_timeout_s", 10.0},
                {"ranks",
                 {rank(0, 0.4, {{{"sequence", 57}, {"op", "all_reduce"}, {"bytes", 4 << 20}, {"dtype", "float32"},
                                 {"state", "started"}, {"age_s", 3.25}}}),
                  rank(1, 6.0), rank(2, 12.0),
                  {{"rank", 3}, {"monitored", false}, {"note", "no runtime heartbeats"}}}}};
  const auto out = lines(render_status(s));
  ASSERT_EQ(out.size(), 6u) << render_status(s);
  EXPECT_EQ(out[0], "job j1: generation 2 (running), restarts 2/3, elapsed 75.2 s, 4 rank(s) on 1 node(s)");
  EXPECT_NE(out[1].find("open collective"), std::string::npos);
  EXPECT_NE(out[2].find("node-a"), std::string::npos);
  EXPECT_NE(out[2].find("in collective"), std::string::npos);
  EXPECT_NE(out[2].find("all_reduce #57 (4.0 MiB float32, 3.2 s)"), std::string::npos) << out[2];
  EXPECT_NE(out[2].find("12.5 ms"), std::string::npos) << out[2];
  EXPECT_NE(out[3].find("late"), std::string::npos) << out[3];     // over half the hang timeout
  EXPECT_NE(out[4].find("silent"), std::string::npos) << out[4];   // over the hang timeout
  EXPECT_NE(out[5].find("no heartbeats"), std::string::npos) << out[5];
}

TEST(StatusCommand, WhileTheWorldFormsItSaysWhoJoinedInsteadOfATableOfRanks) {
  nlohmann::json s = {{"job_id", "j2"}, {"generation", 0}, {"state", "rendezvous"}, {"restarts_used", 0},
                      {"max_restarts", 0}, {"elapsed_s", 3.0}, {"world_size", 8}, {"nnodes", 4},
                      {"nnodes_range", {2, 4}}, {"membership", nlohmann::json::array()},
                      {"rendezvous", "1 of 2:4 node(s) joined generation 0 (hosts: node-a)"}};
  s["ranks"] = {{"hang_timeout_s", 10.0}, {"ranks", {rank(0, 0.0), rank(1, 0.0)}}};
  const auto out = lines(render_status(s));
  ASSERT_EQ(out.size(), 2u) << render_status(s);
  EXPECT_EQ(out[0], "job j2: generation 0 (rendezvous), restarts 0/0, elapsed 3.0 s, 4..8 rank(s) on 2..4 node(s)");
  EXPECT_EQ(out[1], "rendezvous: 1 of 2:4 node(s) joined generation 0 (hosts: node-a); no rank runs until the world "
                    "has formed");
}

TEST(StatusCommand, ACollectiveOfAnotherGroupShowsItsGroup) {
  nlohmann::json s = {{"job_id", "j6"}, {"world_size", 1}, {"nnodes", 1}};
  s["ranks"] = {{"hang_timeout_s", 10.0},
                {"ranks",
                 {rank(0, 0.4, {{{"sequence", 11}, {"op", "all_reduce"}, {"bytes", 4}, {"dtype", "float32"},
                                 {"state", "started"}, {"age_s", 2.5}, {"group", "1"}, {"group_ranks", {0, 1}}}})}}};
  const auto out = lines(render_status(s));
  ASSERT_EQ(out.size(), 3u) << render_status(s);
  EXPECT_NE(out[2].find("all_reduce #11 group 1 (4 B float32, 2.5 s)"), std::string::npos) << out[2];
}

TEST(StatusCommand, ACollectiveOfUnknownSizeShowsOnlyItsWait) {
  // A DDP bucket all-reduce a Python rank saw only through the group's counter.
  nlohmann::json s = {{"job_id", "j7"}, {"world_size", 1}, {"nnodes", 1}};
  s["ranks"] = {{"hang_timeout_s", 10.0},
                {"ranks", {rank(0, 0.4, {{{"sequence", 20}, {"op", "all_reduce"}, {"bytes", 0}, {"dtype", ""},
                                          {"state", "started"}, {"age_s", 5.9}}})}}};
  const auto out = lines(render_status(s));
  ASSERT_EQ(out.size(), 3u) << render_status(s);
  EXPECT_EQ(out[2].substr(out[2].find("all_reduce")), "all_reduce #20 (5.9 s)");
}

TEST(StatusCommand, ARankInNoCollectiveShowsTheSendOrReceiveItWaitsIn) {
  // A pipeline's stages: rank 0 waits to send to 1, rank 1 to receive from any rank.
  nlohmann::json s = {{"job_id", "j8"}, {"world_size", 3}, {"nnodes", 1}};
  nlohmann::json r0 = rank(0, 0.4), r1 = rank(1, 0.4);
  r0["peer_waits"] = {{{"op", "send"}, {"peer", 1}, {"bytes", 1024}, {"age_s", 6.2}},
                      {{"op", "irecv"}, {"peer", 2}, {"bytes", 8}, {"age_s", 1.0}}};
  r1["peer_waits"] = {{{"op", "recv"}, {"peer", -1}, {"bytes", 0}, {"age_s", 3.0}}};
  s["ranks"] = {{"hang_timeout_s", 10.0}, {"ranks", {r0, r1, rank(2, 0.4)}}};
  const auto out = lines(render_status(s));
  ASSERT_EQ(out.size(), 5u) << render_status(s);
  EXPECT_EQ(out[2].substr(out[2].find("send")), "send to 1 (1.0 KiB, 6.2 s)");
  EXPECT_EQ(out[3].substr(out[3].find("recv")), "recv from any (3.0 s)");
  EXPECT_EQ(out[4].back(), '-');
}

TEST(StatusCommand, ListsTheWarningsUnderTheTable) {
  nlohmann::json s = {{"job_id", "j5"}, {"world_size", 2}, {"nnodes", 1}};
  s["ranks"] = {{"hang_timeout_s", 10.0}, {"ranks", {rank(0, 0.4), rank(1, 0.4)}}, {"warnings_total", 1}};
  EXPECT_EQ(render_status(s).find("warnings"), std::string::npos) << "none given: no section";
  s["ranks"]["warnings"] = {{{"kind", "straggler"},
                             {"rank", 1},
                             {"summary", "rank 1 (host node-a, pid 101) is a straggler: busy 0.31 s per step"},
                             {"look_at", "work only rank 1 does outside the training step"},
                             {"age_s", 12.4}}};
  const auto out = lines(render_status(s));
  ASSERT_EQ(out.size(), 6u) << render_status(s);
  EXPECT_EQ(out[4], "warnings (1 given in this generation):");
  EXPECT_EQ(out[5], "  straggler: rank 1 (host node-a, pid 101) is a straggler: busy 0.31 s per step; look at: work "
                    "only rank 1 does outside the training step (12 s ago)");
}

TEST(StatusCommand, ShowsTheFailure) {
  const nlohmann::json s = {{"job_id", "j2"}, {"failure", "silent_rank: rank 1 sent no heartbeat for 3.0 s"}};
  const auto out = lines(render_status(s));
  ASSERT_GE(out.size(), 2u);
  EXPECT_EQ(out[1], "failure: silent_rank: rank 1 sent no heartbeat for 3.0 s");
}

TEST(StatusCommand, ShowsTheMembershipOfAnElasticJob) {
  const nlohmann::json s = {{"job_id", "j3"},
                            {"nnodes_range", {2, 4}},
                            {"membership", {{{"node", 0}, {"host", "a"}}, {{"node", 1}, {"host", "b"}}}},
                            {"membership_changes", 1},
                            {"waiting_nodes", 0},
                            {"departed", {"node 2 (c) went silent: no agent heartbeat for 2.0 s"}}};
  const auto out = lines(render_status(s));
  ASSERT_GE(out.size(), 3u) << render_status(s);
  EXPECT_EQ(out[1], "membership: nodes 0=a 1=b (of 2..4), 1 membership change(s), 0 node(s) waiting to join");
  EXPECT_EQ(out[2], "  left: node 2 (c) went silent: no agent heartbeat for 2.0 s");
  // A fixed-size job says nothing of membership.
  EXPECT_EQ(lines(render_status({{"job_id", "j4"}, {"membership", nlohmann::json::array()}})).size(), 2u);
}

TEST(StatusCommand, SaysWhichEndpointOfAFailoverListCoordinatesTheJob) {
  const nlohmann::json s = {{"job_id", "j5"},
                            {"nnodes_range", {1, 3}},
                            {"membership", {{{"node", 0}, {"host", "b"}}}},
                            {"coordinator_epoch", {1, 2}}};
  const auto out = lines(render_status(s));
  ASSERT_GE(out.size(), 3u) << render_status(s);
  EXPECT_EQ(out[2], "coordinator: --rdzv-endpoint entry 2 of 2 (took the job over)");
}

}  // namespace
}  // namespace ddp
