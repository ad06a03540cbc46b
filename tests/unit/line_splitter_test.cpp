#include "output/line_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddp {
namespace {

std::vector<std::string> split(LineSplitter& s, const std::vector<std::string>& chunks, bool flush = false) {
  std::vector<std::string> lines;
  auto collect = [&](std::string_view l) { lines.emplace_back(l); };
  for (const auto& c : chunks) s.feed(c, collect);
  if (flush) s.flush(collect);
  return lines;
}

TEST(LineSplitter, JoinsLinesSplitAcrossChunks) {
  LineSplitter s;
  EXPECT_EQ(split(s, {"he", "llo\nwor", "ld\n", "x"}), (std::vector<std::string>{"hello", "world"}));
  EXPECT_EQ(split(s, {"y\n"}), std::vector<std::string>{"xy"});
}

TEST(LineSplitter, KeepsEmptyLines) {
  LineSplitter s;
  EXPECT_EQ(split(s, {"\n\na\n"}), (std::vector<std::string>{"", "", "a"}));
}

TEST(LineSplitter, FlushEmitsTheUnterminatedRest) {
  LineSplitter s;
  EXPECT_EQ(split(s, {"a\nb"}, true), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(split(s, {}, true).empty());
}

TEST(LineSplitter, CutsRunawayLinesAtTheLimit) {
  LineSplitter s(4);
  EXPECT_EQ(split(s, {"abcdefghij"}, true), (std::vector<std::string>{"abcd", "efgh", "ij"}));
}

}  // namespace
}  // namespace ddp
