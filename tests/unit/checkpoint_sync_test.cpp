// --sync's pure parts: the DIR=s3://BUCKET/PREFIX target (sync/sync_target.h)
// and the upload queue (sync/upload_queue.h): settle, temp files renamed
// away, rewrites, retries with backoff, the report. FakeClock, no sleeping.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "ddp/common/clock.h"
#include "sync/checkpoint_uploader.h"
#include "sync/directory_watch.h"
#include "sync/sync_target.h"
#include "sync/upload_queue.h"
#include "memory_object_store.h"
#include "temp_dir.h"

namespace ddp {
namespace {

using std::chrono::seconds;

TEST(SyncTarget, ParsesDirBucketAndPrefix) {
  std::string why;
  auto t = parse_sync_target("ckpt=s3://my-bucket.v2/runs//exp1", why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->dir, "ckpt");
  EXPECT_EQ(t->bucket, "my-bucket.v2");
  EXPECT_EQ(t->prefix, "runs/exp1/");
  EXPECT_EQ(object_key(*t, "step_100/model.pt"), "runs/exp1/step_100/model.pt");
  EXPECT_EQ(describe(*t), "s3://my-bucket.v2/runs/exp1/");
  t = parse_sync_target("/data/ck=s3://bkt", why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->prefix, "");
  EXPECT_EQ(object_key(*t, "a.pt"), "a.pt");
}

TEST(SyncTarget, RefusesWhatIsNotATarget) {
  for (const char* bad : {"ckpt", "=s3://bkt/p", "ckpt=gs://bkt/p", "ckpt=s3://", "ckpt=s3://ab/p",
                          "ckpt=s3://Upper/p", "ckpt=s3://-bkt/p", "ckpt=s3://b..kt/p", "ckpt=s3://bkt_x/p"}) {
    std::string why;
    EXPECT_FALSE(parse_sync_target(bad, why).has_value()) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

class UploadQueueTest : public ::testing::Test {
 protected:
  FakeClock clock;
  UploadQueue queue{clock, UploadPolicy{seconds(1), seconds(2), seconds(10)}};
};

TEST_F(UploadQueueTest, AFileIsSentOnceItHasSettled) {
  queue.file_ready("model.pt");
  EXPECT_FALSE(queue.next_due().has_value());
  EXPECT_EQ(queue.next_due_time(), clock.now() + seconds(1));
  clock.advance(seconds(1));
  auto due = queue.next_due();
  ASSERT_EQ(due, "model.pt");
  EXPECT_FALSE(queue.next_due().has_value()) << "being sent: not handed out twice";
  queue.done("model.pt", Status::Ok(), 4096);
  EXPECT_TRUE(queue.idle());
  const SyncReport r = queue.report();
  EXPECT_EQ(r.uploaded, 1);
  EXPECT_EQ(r.uploaded_bytes, 4096);
  EXPECT_EQ(r.pending, 0);
  EXPECT_EQ(r.summary(), "1 file(s) uploaded (4.0 KiB), 0 pending");
}

TEST_F(UploadQueueTest, ATempFileRenamedIntoPlaceIsNeverSent) {
  queue.file_ready(".model.pt.tmp");  // torch.save to a temp name, closed
  clock.advance(std::chrono::milliseconds(200));
  queue.file_gone(".model.pt.tmp");   // renamed away ...
  queue.file_ready("model.pt");       // ... into place
  clock.advance(seconds(1));
  EXPECT_EQ(queue.next_due(), "model.pt");
  EXPECT_FALSE(queue.next_due().has_value());
}

TEST_F(UploadQueueTest, ARewriteBeforeItSettledIsSentOnce) {
  queue.file_ready("latest.pt");
  clock.advance(std::chrono::milliseconds(900));
  queue.file_ready("latest.pt");  // written again: settles anew
  clock.advance(std::chrono::milliseconds(200));
  EXPECT_FALSE(queue.next_due().has_value());
  clock.advance(seconds(1));
  EXPECT_EQ(queue.next_due(), "latest.pt");
  queue.done("latest.pt", Status::Ok(), 1);
  EXPECT_EQ(queue.report().uploaded, 1);
}

TEST_F(UploadQueueTest, ARewriteWhileSendingIsSentAgain) {
  queue.file_ready("latest.pt");
  clock.advance(seconds(1));
  ASSERT_EQ(queue.next_due(), "latest.pt");
  queue.file_ready("latest.pt");  // the send may carry the old content
  queue.done("latest.pt", Status::Ok(), 10);
  EXPECT_FALSE(queue.idle());
  clock.advance(seconds(1));
  EXPECT_EQ(queue.next_due(), "latest.pt");
}

TEST_F(UploadQueueTest, FailuresAreRetriedWithBackoffAndReported) {
  queue.file_ready("a.pt");
  clock.advance(seconds(1));
  const Status down(StatusCode::kUnavailable, "connection refused");
  ASSERT_EQ(queue.next_due(), "a.pt");
  queue.done("a.pt", down, 0);
  EXPECT_EQ(queue.next_due_time(), clock.now() + seconds(2));
  clock.advance(seconds(2));
  ASSERT_EQ(queue.next_due(), "a.pt");
  queue.done("a.pt", down, 0);
  EXPECT_EQ(queue.next_due_time(), clock.now() + seconds(4));
  for (int i = 0; i < 5; ++i) {
    clock.advance(seconds(10));
    ASSERT_EQ(queue.next_due(), "a.pt");
    queue.done("a.pt", down, 0);
  }
  EXPECT_EQ(queue.next_due_time(), clock.now() + seconds(10)) << "capped at max_retry";
  SyncReport r = queue.report();
  ASSERT_EQ(r.failing.size(), 1u);
  EXPECT_EQ(r.failing[0].attempts, 7);
  EXPECT_EQ(r.failing[0].last_error, "connection refused");
  EXPECT_EQ(r.pending, 1);
  EXPECT_EQ(r.to_json()["failing"][0]["path"], "a.pt");
  // The bucket is back.
  clock.advance(seconds(10));
  ASSERT_EQ(queue.next_due(), "a.pt");
  queue.done("a.pt", Status::Ok(), 5);
  r = queue.report();
  EXPECT_TRUE(r.failing.empty());
  EXPECT_EQ(r.uploaded, 1);
  EXPECT_TRUE(queue.idle());
}

TEST_F(UploadQueueTest, AFileGoneBeforeItsSendEndedIsDropped) {
  queue.file_ready("tmp.pt");
  clock.advance(seconds(1));
  ASSERT_EQ(queue.next_due(), "tmp.pt");
  queue.file_gone("tmp.pt");
  queue.done("tmp.pt", Status(StatusCode::kUnavailable, "reset"), 0);
  EXPECT_TRUE(queue.idle()) << "no retries for a file that is no more";
  queue.file_ready("old.pt");
  clock.advance(seconds(1));
  ASSERT_EQ(queue.next_due(), "old.pt");
  queue.done("old.pt", Status(StatusCode::kNotFound, "old.pt: no such file"), 0);
  EXPECT_TRUE(queue.idle());
  EXPECT_EQ(queue.report().uploaded, 0);
}

TEST_F(UploadQueueTest, TheOldestDueFileGoesFirst) {
  queue.file_ready("b.pt");
  clock.advance(std::chrono::milliseconds(100));
  queue.file_ready("a.pt");
  clock.advance(seconds(2));
  EXPECT_EQ(queue.next_due(), "b.pt");
  EXPECT_EQ(queue.next_due(), "a.pt");
}

namespace fs = std::filesystem;

// A real folder: inotify queues each event as the system call returns, so
// read_events() right after a write sees it (no waiting).
class DirectoryWatchTest : public ::testing::Test {
 protected:
  void write(const std::string& rel, const std::string& text = "x") { std::ofstream(root_ / rel) << text; }
  static std::vector<std::string> finished(const std::vector<DirectoryWatch::Event>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) {
      if (e.kind == DirectoryWatch::Event::Kind::kFinished) out.push_back(e.relative_path);
    }
    return out;
  }
  testing::TempDir dir_{"ddp_watch_"};
  const fs::path& root_ = dir_.path();
};

TEST_F(DirectoryWatchTest, AClosedFileIsFinished) {
  DirectoryWatch watch(root_.string());
  EXPECT_TRUE(watch.read_events().empty());
  write("a.pt");
  EXPECT_EQ(finished(watch.read_events()), std::vector<std::string>{"a.pt"});
  fs::remove(root_ / "a.pt");
  auto events = watch.read_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, DirectoryWatch::Event::Kind::kGone);
}

TEST_F(DirectoryWatchTest, ATempFileRenamedIntoPlaceReachesTheBucketOnce) {
  DirectoryWatch watch(root_.string());
  FakeClock clock;
  UploadQueue queue(clock, UploadPolicy{});
  write("model.pt.tmp", "weights");
  fs::rename(root_ / "model.pt.tmp", root_ / "model.pt");
  for (const auto& e : watch.read_events()) {
    if (e.kind == DirectoryWatch::Event::Kind::kFinished) {
      queue.file_ready(e.relative_path);
    } else {
      queue.file_gone(e.relative_path);
    }
  }
  clock.advance(std::chrono::seconds(1));
  EXPECT_EQ(queue.next_due(), "model.pt");
  EXPECT_FALSE(queue.next_due().has_value()) << "the temp file is never sent";
}

TEST_F(DirectoryWatchTest, FoldersMadeOrMovedInLaterAreWatched) {
  DirectoryWatch watch(root_.string());
  fs::create_directory(root_ / "step_100");
  EXPECT_TRUE(finished(watch.read_events()).empty());
  write("step_100/model.pt");
  EXPECT_EQ(finished(watch.read_events()), std::vector<std::string>{"step_100/model.pt"});
  // A folder filled elsewhere and renamed in (ddptrain's checkpoint layout).
  const fs::path outside = root_.string() + "_staging";
  fs::create_directories(outside / "inner");
  std::ofstream(outside / "inner" / "optim.pt") << "o";
  std::ofstream(outside / "meta.json") << "{}";
  fs::rename(outside, root_ / "step_200");
  auto got = finished(watch.read_events());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"step_200/inner/optim.pt", "step_200/meta.json"}));
  write("step_200/inner/late.pt");
  EXPECT_EQ(finished(watch.read_events()), std::vector<std::string>{"step_200/inner/late.pt"});
}

TEST_F(DirectoryWatchTest, ExistingFilesAreListed) {
  fs::create_directory(root_ / "sub");
  write("a.pt");
  write("sub/b.pt");
  DirectoryWatch watch(root_.string());
  auto files = watch.existing_files();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"a.pt", "sub/b.pt"}));
  write("sub/c.pt");
  EXPECT_EQ(finished(watch.read_events()), std::vector<std::string>{"sub/c.pt"}) << "folders present at start are watched";
}

// The uploader works in the same kind of real folder.
using CheckpointUploaderTest = DirectoryWatchTest;

TEST_F(CheckpointUploaderTest, FinishedFilesAreSentAndADownBucketIsRetried) {
  write("before.pt");  // there before the job: not sent again
  FakeClock clock;
  MemoryStore store;
  std::string why;
  auto target = parse_sync_target(root_.string() + "=s3://bkt/run1", why);
  ASSERT_TRUE(target.has_value()) << why;
  CheckpointUploader uploader(*target, store, clock, UploadPolicy{std::chrono::seconds(1), std::chrono::seconds(2),
                                                                   std::chrono::seconds(8)});
  EXPECT_FALSE(uploader.run_once().has_value());
  write("ckpt.pt.tmp", "v1");
  fs::rename(root_ / "ckpt.pt.tmp", root_ / "ckpt.pt");
  EXPECT_EQ(uploader.run_once(), clock.now() + std::chrono::seconds(1)) << "settling";
  EXPECT_EQ(store.attempts, 0);
  store.down = true;
  clock.advance(std::chrono::seconds(1));
  EXPECT_EQ(uploader.run_once(), clock.now() + std::chrono::seconds(2)) << "retried after the backoff";
  EXPECT_EQ(uploader.report().failing.size(), 1u);
  store.down = false;
  clock.advance(std::chrono::seconds(2));
  EXPECT_FALSE(uploader.run_once().has_value());
  EXPECT_TRUE(uploader.idle());
  EXPECT_EQ(store.objects, (std::map<std::string, std::string>{{"run1/ckpt.pt", "v1"}}));
  const SyncReport r = uploader.report();
  EXPECT_EQ(r.uploaded, 1);
  EXPECT_EQ(r.uploaded_bytes, 2);
  EXPECT_TRUE(r.failing.empty());
}

TEST_F(DirectoryWatchTest, AMissingFolderIsAnError) {
  EXPECT_THROW(DirectoryWatch((root_ / "missing").string()), std::system_error);
}

}  // namespace
}  // namespace ddp
