// --sync from a job's start to its end (sync/checkpoint_sync.h): the download
// of an empty folder, the uploads on their own thread, the bounded wait at the
// end and its report; and `doctor --sync`'s checks (doctor/sync_checks.h).
// Real folders and a real thread; the bucket is in memory.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "doctor/sync_checks.h"
#include "memory_object_store.h"
#include "sync/checkpoint_sync.h"
#include "temp_dir.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CheckpointSyncTest : public ::testing::Test {
 protected:
  SyncSettings settings(bool mirror = false) {
    std::string why;
    SyncSettings s;
    s.targets.push_back(*parse_sync_target((root_ / "ckpt").string() + "=s3://bkt/run1", why));
    s.mirror_deletions = mirror;
    return s;
  }
  // settle 0: a file is sent as soon as it is closed. Tests that count what
  // was sent or deleted pass kTempFileSettle: write_into_place renames its
  // temp file a moment after closing it, and with no settle time at all the
  // uploader may send the temp file in between (and, mirroring deletions,
  // delete it again after the rename).
  static constexpr Duration kTempFileSettle = milliseconds(200);
  std::unique_ptr<CheckpointSync> make(SyncSettings s, std::string state_file = {},
                                       Duration settle = milliseconds(0)) {
    return std::make_unique<CheckpointSync>(
        std::move(s), [this](const SyncTarget&) { return std::make_unique<StoreRef>(store_); }, std::move(state_file),
        UploadPolicy{settle, milliseconds(20), milliseconds(40)});
  }
  void write_into_place(const std::string& rel, const std::string& text) {
    const fs::path target = root_ / "ckpt" / rel;
    fs::create_directories(target.parent_path());
    std::ofstream(target.string() + ".tmp") << text;
    fs::rename(target.string() + ".tmp", target);
  }
  testing::TempDir dir_{"ddp_sync_"};
  const fs::path& root_ = dir_.path();
  MemoryStore store_;
};

TEST_F(CheckpointSyncTest, AMissingFolderIsFilledFromTheBucketAndNothingLandsOutsideIt) {
  store_.objects = {{"run1/step_10/model.pt", "w10"},
                    {"run1/latest", "step_10"},
                    {"run1/folder/", ""},        // a folder marker: nothing to write
                    {"run1/../escape.pt", "x"},  // a key that would leave the folder
                    {"run2/other.pt", "not ours"}};
  auto sync = make(settings());
  sync->download_missing();
  EXPECT_EQ(read(root_ / "ckpt" / "step_10" / "model.pt"), "w10");
  EXPECT_EQ(read(root_ / "ckpt" / "latest"), "step_10");
  EXPECT_FALSE(fs::exists(root_ / "escape.pt"));
  EXPECT_FALSE(fs::exists(root_ / "ckpt" / "other.pt"));
  EXPECT_TRUE(sync->state_json().is_null()) << "a node that does not upload has no state";
}

TEST_F(CheckpointSyncTest, AFolderWithFilesIsLeftAsItIs) {
  fs::create_directories(root_ / "ckpt");
  std::ofstream(root_ / "ckpt" / "mine.pt") << "local";
  store_.objects = {{"run1/remote.pt", "remote"}};
  make(settings())->download_missing();
  EXPECT_FALSE(fs::exists(root_ / "ckpt" / "remote.pt"));
}

TEST_F(CheckpointSyncTest, FilesFinishedWhileTheJobRunsAreUploadedBeforeFinishReturns) {
  const std::string state_file = (root_ / "sync.json").string();
  auto sync = make(settings(), state_file, kTempFileSettle);
  sync->start_uploads();
  write_into_place("step_20/model.pt", "w20");
  write_into_place("latest", "step_20");
  const nlohmann::json report = sync->finish(seconds(30));
  EXPECT_EQ(store_.objects["run1/step_20/model.pt"], "w20");
  EXPECT_EQ(store_.objects["run1/latest"], "step_20");
  EXPECT_EQ(store_.objects.count("run1/latest.tmp"), 0u) << "temp files are never sent";
  ASSERT_EQ(report["targets"].size(), 1u);
  EXPECT_EQ(report["targets"][0]["uploaded"], 2);
  EXPECT_EQ(report["targets"][0]["pending"], 0);
  EXPECT_EQ(report["targets"][0]["target"], "s3://bkt/run1/");
  EXPECT_EQ(nlohmann::json::parse(read(state_file)), report) << "list reads the same state";
  EXPECT_NE(sync->summary().find("2 file(s) uploaded"), std::string::npos) << sync->summary();
}

TEST_F(CheckpointSyncTest, ADownBucketDelaysNothingBeyondTheBoundAndTheReportSaysWhatWasNotSent) {
  auto sync = make(settings());
  store_.down = true;
  sync->start_uploads();
  write_into_place("model.pt", "w");
  const auto started = std::chrono::steady_clock::now();
  const nlohmann::json report = sync->finish(milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(5));
  ASSERT_EQ(report["targets"].size(), 1u);
  EXPECT_EQ(report["targets"][0]["uploaded"], 0);
  EXPECT_EQ(report["targets"][0]["pending"], 1);
  ASSERT_EQ(report["targets"][0]["failing"].size(), 1u);
  EXPECT_EQ(report["targets"][0]["failing"][0]["path"], "model.pt");
  EXPECT_EQ(report["targets"][0]["failing"][0]["last_error"], "bucket down");
}

TEST_F(CheckpointSyncTest, ASignalDuringTheFinalWaitEndsIt) {
  auto sync = make(settings());
  store_.down = true;
  sync->start_uploads();
  write_into_place("model.pt", "w");
  int interrupt[2];
  ASSERT_EQ(pipe(interrupt), 0);
  ASSERT_EQ(write(interrupt[1], "x", 1), 1);  // as a second Ctrl-C on the signalfd
  const auto started = std::chrono::steady_clock::now();
  const nlohmann::json report = sync->finish(seconds(600), interrupt[0]);
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(5));
  EXPECT_EQ(report["targets"][0]["uploaded"], 0);
  close(interrupt[0]);
  close(interrupt[1]);
}

TEST_F(CheckpointSyncTest, DeletionsAreMirroredOnlyWhenAskedAndOnlyForWhatTheBucketHolds) {
  for (const bool mirror : {false, true}) {
    store_.objects.clear();
    fs::remove_all(root_ / "ckpt");
    auto sync = make(settings(mirror), {}, kTempFileSettle);
    sync->start_uploads();
    write_into_place("old.pt", "w1");
    // Wait for the upload through finish() of a first sync, then delete.
    sync->finish(seconds(30));
    ASSERT_EQ(store_.objects.count("run1/old.pt"), 1u);
    auto again = make(settings(mirror), {}, kTempFileSettle);
    again->start_uploads();
    fs::remove(root_ / "ckpt" / "old.pt");
    write_into_place("new.pt", "w2");  // gives finish() something to wait for after the deletion
    const nlohmann::json report = again->finish(seconds(30));
    EXPECT_EQ(store_.objects.count("run1/old.pt"), mirror ? 0u : 1u) << "mirror " << mirror;
    EXPECT_EQ(report["targets"][0]["deleted"], mirror ? 1 : 0);
  }
}

std::optional<std::string> env_of(const std::map<std::string, std::string>& vars, const char* name) {
  auto it = vars.find(name);
  return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
}

TEST(SyncChecks, NameTheCredentialsAndTellWhetherTheKeyMayListWriteAndDelete) {
  const std::map<std::string, std::string> vars = {{"AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY123456"},
                                                   {"AWS_SECRET_ACCESS_KEY", "very-secret-value"},
                                                   {"HOME", "/nonexistent"}};
  const AwsEnv env = [&](const char* name) { return env_of(vars, name); };
  MemoryStore store;
  std::string why;
  const std::vector<SyncTarget> targets = {*parse_sync_target("ck=s3://bkt/run1", why)};
  const SyncStoreFactory factory = [&](const AwsCredentials&, const SyncTarget&) {
    return std::make_unique<StoreRef>(store);
  };
  auto results = sync_checks(targets, env, factory, ".probe");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].level, CheckLevel::kOk);
  EXPECT_EQ(results[0].reason.find("very-secret-value"), std::string::npos) << results[0].reason;
  EXPECT_EQ(results[1].name, "sync s3://bkt/run1/");
  EXPECT_EQ(results[1].level, CheckLevel::kOk) << results[1].reason;
  EXPECT_TRUE(store.objects.empty()) << "the probe object is deleted";

  store.down = true;
  results = sync_checks(targets, env, factory, ".probe");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].level, CheckLevel::kFail);
  EXPECT_EQ(results[1].reason, "cannot list: bucket down");

  const AwsEnv no_credentials = [](const char* name) {
    return std::string(name) == "HOME" ? std::optional<std::string>("/nonexistent") : std::nullopt;
  };
  results = sync_checks(targets, no_credentials, factory, ".probe");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].level, CheckLevel::kFail);
}

}  // namespace
}  // namespace ddp
