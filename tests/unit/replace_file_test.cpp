// replace_file: a file's content set at once, by writers that may share its
// folder (the agents of nodes sharing a log folder write failure.json
// together). Real files in a temporary folder.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddp/common/replace_file.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

class ReplaceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ddp-replace-file-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string read(const fs::path& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }

  fs::path dir_;
};

TEST_F(ReplaceFileTest, ReplacesTheWholeContentAndLeavesNoOtherFile) {
  const fs::path path = dir_ / "failure.json";
  std::error_code ec;
  ASSERT_TRUE(replace_file(path, std::string(700, 'a') + "\n", ec)) << ec.message();
  ASSERT_TRUE(replace_file(path, "{\"short\": 1}\n", ec)) << ec.message();
  EXPECT_EQ(read(path), "{\"short\": 1}\n") << "nothing of the longer text is left behind it";
  EXPECT_EQ(names(), std::vector<std::string>{"failure.json"});
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(fs::status(path).permissions(), static_cast<fs::perms>(0666 & ~mask)) << "as a new file is made";
}

TEST_F(ReplaceFileTest, AFolderThatIsNotThereIsAnErrorAndLeavesNothing) {
  std::error_code ec;
  EXPECT_FALSE(replace_file(dir_ / "gone" / "failure.json", "x\n", ec));
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_TRUE(names().empty());
}

TEST_F(ReplaceFileTest, ConcurrentWritersLeaveOneWriterTextWholeForEveryReader) {
  // Four writers of texts of different lengths, as the agents of four nodes
  // on shared storage; a reader must only ever see one of them whole.
  const fs::path path = dir_ / "failure.json";
  std::set<std::string> texts;
  for (int w = 0; w < 4; ++w) texts.insert(std::string(100 + 300 * w, static_cast<char>('a' + w)) + "\n");
  std::error_code first;
  ASSERT_TRUE(replace_file(path, *texts.begin(), first));
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (const std::string& text : texts) {
    writers.emplace_back([&path, text] {
      for (int i = 0; i < 200; ++i) {
        std::error_code ec;
        replace_file(path, text, ec);
      }
    });
  }
  int reads = 0;
  std::vector<std::string> torn;
  std::thread reader([&] {
    while (!done) {
      const std::string seen = read(path);
      ++reads;
      if (!texts.count(seen)) torn.push_back(seen);
    }
  });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_GT(reads, 0);
  EXPECT_TRUE(torn.empty()) << torn.size() << " of " << reads << " reads saw a mixed or partial text";
  EXPECT_TRUE(texts.count(read(path)));
  EXPECT_EQ(names(), std::vector<std::string>{"failure.json"});
}

}  // namespace
}  // namespace ddp
