// What a SIGTERM means to the ranks (job/rank_signal_intent.h): the word the
// agent leaves for them, whole, and gone when the agent is.
#include "job/rank_signal_intent.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ddp {
namespace {

namespace fs = std::filesystem;

class RankSignalIntentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rank_signal_intent_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(RankSignalIntentTest, SaysStoppingThenTerminatingAndIsRemovedWithTheAgent) {
  const fs::path path = dir_ / "1.signal_intent";
  {
    std::ofstream(path) << "terminating\n";  // left by a crashed agent of the same pid
    RankSignalIntent intent(path);
    EXPECT_FALSE(fs::exists(path)) << "nothing is under way when the agent starts";
    intent.stopping();
    EXPECT_EQ(read(path), "stopping\n");
    intent.stopping();
    EXPECT_EQ(read(path), "stopping\n");
    intent.terminating();
    EXPECT_EQ(read(path), "terminating\n");
    intent.clear();
    EXPECT_FALSE(fs::exists(path)) << "a new attempt starts with nothing under way";
    intent.terminating();
    EXPECT_TRUE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(RankSignalIntentTest, WithoutAPathNothingIsWritten) {
  RankSignalIntent intent{fs::path()};
  intent.stopping();
  intent.terminating();
  EXPECT_TRUE(intent.path().empty());
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(RankSignalIntentTest, AnUnwritableFolderIsAWarningNotAFailure) {
  RankSignalIntent intent(dir_ / "missing" / "1.signal_intent");
  EXPECT_NO_THROW(intent.stopping());
  EXPECT_FALSE(fs::exists(dir_ / "missing"));
}

}  // namespace
}  // namespace ddp
