// Reading a log another process writes (detach/console_tail.h): the last
// lines, and following what is appended.

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "detach/console_tail.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

class ConsoleTailTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = fs::temp_directory_path() / ("ddp_console_" + std::to_string(::getpid()) + ".log"); }
  void TearDown() override { fs::remove(path_); }
  void append(const std::string& text) { std::ofstream(path_, std::ios::app) << text; }
  // What follower.copy_new copies, as a string.
  static std::string copied(FileFollower& f) {
    char* buf = nullptr;
    size_t len = 0;
    std::FILE* mem = ::open_memstream(&buf, &len);
    f.copy_new(mem);
    std::fclose(mem);
    std::string out(buf, len);
    std::free(buf);
    return out;
  }
  fs::path path_;
};

TEST_F(ConsoleTailTest, LastLines) {
  append("a\nb\nc\n");
  EXPECT_EQ(last_lines_of_file(path_, 2), "b\nc\n");
  EXPECT_EQ(last_lines_of_file(path_, 1), "c\n");
  EXPECT_EQ(last_lines_of_file(path_, 10), "a\nb\nc\n");
  off_t end = -1;
  EXPECT_EQ(last_lines_of_file(path_, 0, &end), "");
  EXPECT_EQ(end, 6);
  append("partial");
  EXPECT_EQ(last_lines_of_file(path_, 2, &end), "b\nc\n") << "a line still being written is left out";
  EXPECT_EQ(end, 6) << "following starts at that line, so it is shown whole";
  FileFollower f(path_, end);
  append(" line\n");
  EXPECT_EQ(copied(f), "partial line\n");
  EXPECT_EQ(last_lines_of_file((path_.string() + ".missing"), 3, &end), "");
  EXPECT_EQ(end, 0);
}

TEST_F(ConsoleTailTest, FollowingCopiesWhatIsAppendedOnce) {
  append("old\n");
  off_t end = 0;
  last_lines_of_file(path_, 5, &end);
  FileFollower f(path_, end);
  EXPECT_EQ(copied(f), "");
  append("new 1\n");
  ASSERT_GE(f.change_fd(), 0);
  pollfd p{f.change_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 1) << "the write is signalled, no waiting needed";
  EXPECT_EQ(copied(f), "new 1\n");
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "copying drains the signal";
  append("new 2\n");
  EXPECT_EQ(copied(f), "new 2\n");
  EXPECT_EQ(copied(f), "");
}

TEST_F(ConsoleTailTest, ATruncatedFileIsReadAgainFromItsStart) {
  append("0123456789\n");
  FileFollower f(path_, 11);
  std::ofstream(path_, std::ios::trunc) << "re\n";
  EXPECT_EQ(copied(f), "re\n");
}

TEST_F(ConsoleTailTest, AWholeLargeFileIsCopied) {
  std::string big;
  for (int i = 0; i < 40000; ++i) big += "line " + std::to_string(i) + " of a log larger than one chunk\n";
  append(big);
  FileFollower f(path_, 0);
  EXPECT_EQ(copied(f), big);
}

}  // namespace
}  // namespace ddp
