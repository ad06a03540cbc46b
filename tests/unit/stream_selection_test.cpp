#include "cli/stream_selection.h"

#include <gtest/gtest.h>

#include "cli/usage_error.h"

namespace ddp {
namespace {

TEST(StreamSelection, OneValueForEveryRank) {
  const auto s = StreamSelection::parse("redirects", "3", 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(s.selects_stdout(r));
    EXPECT_TRUE(s.selects_stderr(r));
  }
  const auto none = StreamSelection::parse("redirects", "0", 4);
  EXPECT_FALSE(none.selects_stdout(0));
  const auto err = StreamSelection::parse("redirects", "2", 4);
  EXPECT_FALSE(err.selects_stdout(1));
  EXPECT_TRUE(err.selects_stderr(1));
}

TEST(StreamSelection, PerRankMapLeavesOthersAtZero) {
  const auto s = StreamSelection::parse("tee", "0:1,2:2", 4);
  EXPECT_TRUE(s.selects_stdout(0));
  EXPECT_FALSE(s.selects_stderr(0));
  EXPECT_FALSE(s.selects_stdout(1));
  EXPECT_TRUE(s.selects_stderr(2));
  EXPECT_FALSE(s.selects_stdout(3));
}

TEST(StreamSelection, RejectsBadValuesNamingTheOption) {
  for (const char* bad : {"4", "x", "-1", "", "0:", "9:1", "0-1", "0:1,x", "0:1,", ",0:1", "0:1,,1:2"}) {
    try {
      StreamSelection::parse("redirects", bad, 2);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--redirects"), std::string::npos) << e.what();
    }
  }
}

TEST(LocalRanksFilter, ParsesAndValidates) {
  EXPECT_TRUE(parse_local_ranks_filter("", 4).empty());
  EXPECT_EQ(parse_local_ranks_filter("0,2", 4), (std::set<int>{0, 2}));
  EXPECT_THROW(parse_local_ranks_filter("4", 4), UsageError);
  EXPECT_THROW(parse_local_ranks_filter("a", 4), UsageError);
  EXPECT_THROW(parse_local_ranks_filter("-1", 4), UsageError);
  EXPECT_THROW(parse_local_ranks_filter(",", 4), UsageError);
}

TEST(LocalRanksFilter, RefusesEmptyEntriesAnywhere) {
  // A trailing comma once passed as "0": getline drops the last empty item.
  for (const char* bad : {"0,", "0,1,", ",0", "0,,1", ",,"}) {
    try {
      parse_local_ranks_filter(bad, 4);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--local-ranks-filter"), std::string::npos) << e.what();
    }
  }
}

TEST(ParseInt, WholeNonNegativeNumbersOnly) {
  int v = 0;
  EXPECT_TRUE(parse_int("17", v));
  EXPECT_EQ(v, 17);
  EXPECT_FALSE(parse_int("17x", v));
  EXPECT_FALSE(parse_int("", v));
  EXPECT_FALSE(parse_int("-3", v));
  EXPECT_FALSE(parse_int("99999999999", v));
  EXPECT_FALSE(parse_int("-0", v));  // from_chars reads it as 0
  EXPECT_THROW(parse_local_ranks_filter("-0", 4), UsageError);
}

}  // namespace
}  // namespace ddp
