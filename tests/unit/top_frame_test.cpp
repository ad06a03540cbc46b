// `ddplaunch top`'s frames: a status document on a terminal of a given size
// (redrawn in place, cut to its height and width, the ranks in trouble first
// when not all fit) and on a pipe (plain text, every rank, no escapes).
#include "cli/top_frame.h"

#include <gtest/gtest.h>

#include "text_lines.h"

#include <sstream>
#include <string>
#include <vector>

namespace ddp {
namespace {

const std::string kHome = "\x1b[H";
const std::string kLineEnd = "\x1b[K";
const std::string kScreenEnd = "\x1b[J";

nlohmann::json rank(int r, double heartbeat_age_s = 0.5, bool exited = false) {
  return {{"rank", r},   {"monitored", true}, {"host", "node-a"},           {"pid", 100 + r},
          {"step", 40 + r}, {"phase", "forward"}, {"step_seconds", 0.02}, {"heartbeat_age_s", heartbeat_age_s},
          {"exited", exited}, {"open_collectives", nlohmann::json::array()}};
}

nlohmann::json job(const std::vector<nlohmann::json>& ranks) {
  nlohmann::json s = {{"job_id", "j1"},      {"generation", 1},   {"state", "running"},
                      {"restarts_used", 1},  {"max_restarts", 3}, {"elapsed_s", 12.5},
                      {"world_size", static_cast<int>(ranks.size())}, {"nnodes", 1}};
  s["ranks"] = {{"hang_timeout_s", 10.0}, {"monitored_ranks", static_cast<int>(ranks.size())}, {"ranks", ranks}};
  return s;
}

nlohmann::json job_of(int n) {
  std::vector<nlohmann::json> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(rank(r));
  return job(ranks);
}

using ddp::testing::lines;

// A terminal frame's lines without their escapes; fails unless the frame
// starts at home, clears each line's end and the screen's rest.
std::vector<std::string> screen_lines(const std::string& frame) {
  EXPECT_EQ(frame.rfind(kHome, 0), 0u) << "a frame starts at the cursor's home";
  EXPECT_EQ(frame.substr(frame.size() - kScreenEnd.size()), kScreenEnd) << "and clears the rest of the screen";
  std::vector<std::string> out;
  for (std::string l : lines(frame.substr(kHome.size(), frame.size() - kHome.size() - kScreenEnd.size()))) {
    EXPECT_GE(l.size(), kLineEnd.size());
    EXPECT_EQ(l.substr(l.size() - kLineEnd.size()), kLineEnd) << "each line clears its end: " << l;
    out.push_back(l.substr(0, l.size() - kLineEnd.size()));
  }
  return out;
}

int rank_of_row(const std::string& row) { return std::stoi(row); }

TEST(TopFrame, OnAPipeItIsPlainTextWithEveryRank) {
  const std::string frame = render_top_frame(job_of(30), TopScreen{false, 10, 40});
  EXPECT_EQ(frame.find('\x1b'), std::string::npos) << "no escapes when stdout is not a terminal";
  const auto out = lines(frame);
  ASSERT_EQ(out.size(), 32u) << frame;  // the header, the column names, 30 ranks: no terminal, no cut
  EXPECT_EQ(out[0], "job j1: generation 1 (running), restarts 1/3, elapsed 12.5 s, 30 rank(s) on 1 node(s), "
                    "30 monitored");
  EXPECT_NE(out[1].find("heartbeat"), std::string::npos) << out[1];
  for (int r = 0; r < 30; ++r) {
    EXPECT_EQ(rank_of_row(out[2 + r]), r) << out[2 + r];
    EXPECT_NE(out[2 + r].find(std::to_string(40 + r)), std::string::npos) << "its step: " << out[2 + r];
  }
  EXPECT_EQ(frame.find("more rank"), std::string::npos);
}

TEST(TopFrame, WhileTheWorldFormsItSaysWhoJoinedAndHasNoTable) {
  nlohmann::json s = job_of(2);
  s["state"] = "rendezvous";
  s["rendezvous"] = "1 of 2 node(s) joined generation 1 (hosts: node-a); not joined yet: node rank(s) 1";
  const auto out = lines(render_top_frame(s, TopScreen{}));
  ASSERT_EQ(out.size(), 2u) << render_top_frame(s, TopScreen{});
  EXPECT_EQ(out[0], "job j1: generation 1 (rendezvous), restarts 1/3, elapsed 12.5 s, 2 rank(s) on 1 node(s)");
  EXPECT_EQ(out[1], "rendezvous: 1 of 2 node(s) joined generation 1 (hosts: node-a); not joined yet: node rank(s) 1; "
                    "no rank runs until the world has formed");
}

TEST(TopFrame, OnATerminalEveryRankThatFitsIsRedrawnInPlace) {
  const auto out = screen_lines(render_top_frame(job_of(3), TopScreen{true, 24, 200}));
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].rfind("job j1: generation 1 (running)", 0), 0u) << out[0];
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rank_of_row(out[2 + r]), r) << out[2 + r];
}

TEST(TopFrame, RanksThatDoNotFitAreCountedAndTheOnesInTroubleComeFirst) {
  std::vector<nlohmann::json> ranks;
  for (int r = 0; r < 10; ++r) ranks.push_back(rank(r));
  ranks[7] = rank(7, /*heartbeat_age_s=*/30.0);  // silent: over the hang timeout of 10 s
  ranks[9] = rank(9, 0.5, /*exited=*/true);
  // 8 rows: 7 lines (the last stays free), 2 of them the header and the column names.
  const auto out = screen_lines(render_top_frame(job(ranks), TopScreen{true, 8, 200}));
  ASSERT_EQ(out.size(), 7u);
  EXPECT_NE(out[2].find("silent"), std::string::npos) << out[2];
  EXPECT_EQ(rank_of_row(out[2]), 7);
  EXPECT_EQ(rank_of_row(out[3]), 9);
  EXPECT_EQ(rank_of_row(out[4]), 0);
  EXPECT_EQ(rank_of_row(out[5]), 1);
  EXPECT_EQ(out[6], "... 6 more rank(s)");
}

TEST(TopFrame, RanksInRankOrderWhenTheyAllFit) {
  std::vector<nlohmann::json> ranks{rank(0), rank(1, 30.0), rank(2)};
  const auto out = screen_lines(render_top_frame(job(ranks), TopScreen{true, 6, 200}));
  ASSERT_EQ(out.size(), 5u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rank_of_row(out[2 + r]), r) << out[2 + r];
}

TEST(TopFrame, LinesAreCutToTheTerminalsWidth) {
  for (const std::string& line : screen_lines(render_top_frame(job_of(3), TopScreen{true, 24, 30}))) {
    EXPECT_LE(line.size(), 30u) << line;
  }
}

TEST(TopFrame, AScreenSmallerThanTheHeaderGetsWhatFits) {
  const auto out = screen_lines(render_top_frame(job_of(3), TopScreen{true, 2, 80}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rfind("job j1", 0), 0u);
}

TEST(TopFrame, ShowsTheFailureUnderTheHeader) {
  nlohmann::json s = job_of(2);
  s["failure"] = "rank 1 exited with code 3";
  const auto out = lines(render_top_frame(s, TopScreen{}));
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[1], "failure: rank 1 exited with code 3");
}

// Warnings given about 5 ranks, one each: rank 5 + i gets the i-th.
nlohmann::json job_with_warnings(int n) {
  nlohmann::json s = job_of(n);
  nlohmann::json given = nlohmann::json::array();
  for (int i = 0; i < 5; ++i) {
    const int r = 5 + i;
    s["ranks"]["ranks"][r]["warnings"] = {{{"kind", "straggler"}}};
    given.push_back({{"kind", "straggler"},
                     {"rank", r},
                     {"summary", "rank " + std::to_string(r) + " is a straggler"},
                     {"look_at", "its data loading"},
                     {"age_s", 10.0 - i}});
  }
  s["ranks"]["warnings"] = given;
  s["ranks"]["warnings_total"] = 5;
  return s;
}

TEST(TopFrame, OnATerminalTheLastWarningsComeFirstAndTheRanksWarnedAboutLeadTheTable) {
  // 12 rows: 11 lines; the job line, 4 of warnings, the column names, 5 for ranks.
  const auto out = screen_lines(render_top_frame(job_with_warnings(20), TopScreen{true, 12, 200}));
  ASSERT_EQ(out.size(), 11u);
  EXPECT_EQ(out[1], "warnings (5 given in this generation, the last 3 here):");
  EXPECT_EQ(out[2], "  straggler: rank 7 is a straggler; look at: its data loading (8 s ago)");
  EXPECT_EQ(out[4], "  straggler: rank 9 is a straggler; look at: its data loading (6 s ago)");
  EXPECT_NE(out[5].find("heartbeat"), std::string::npos) << out[5];
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rank_of_row(out[6 + i]), 5 + i) << out[6 + i];
  EXPECT_EQ(out[10], "... 16 more rank(s)");
}

TEST(TopFrame, OnAPipeItListsTheWarningsAsStatusDoes) {
  const auto out = lines(render_top_frame(job_with_warnings(10), TopScreen{}));
  ASSERT_EQ(out.size(), 1u + 6u + 1u + 10u);
  EXPECT_EQ(out[1], "warnings (5 given in this generation):");
  EXPECT_EQ(out[6], "  straggler: rank 9 is a straggler; look at: its data loading (6 s ago)");
  for (int r = 0; r < 10; ++r) EXPECT_EQ(rank_of_row(out[8 + r]), r) << "every rank in rank order";
}

}  // namespace
}  // namespace ddp
