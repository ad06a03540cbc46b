// CheckpointStore: round trips, pruning, detection of damaged files, and a
// real crash test (a child SIGKILLed while saving) on a temporary directory.

#include "ddp/common/checkpoint_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace ddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr size_t kHeaderSize = 48;  // see the format in checkpoint_store.h

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ckpt_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    root = tmpl;
    dir = root + "/ckpts";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  static std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  static void flip_bit(const std::string& path, size_t offset, int bit = 0) {
    std::string bytes = read_file(path);
    ASSERT_LT(offset, bytes.size());
    bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
    write_file(path, bytes);
  }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string root;
  std::string dir;
};

// Deterministic payload of a given step (the crash test checks it across processes).
std::string payload_for(int64_t step, size_t size) {
  std::string s(size, '\0');
  uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1);
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&s[i], &x, std::min<size_t>(8, size - i));
  }
  return s;
}

TEST_F(CheckpointStoreTest, RoundTripsMetadataAndBinaryPayload) {
  CheckpointStore store(dir, 3);
  EXPECT_TRUE(fs::is_directory(dir));
  std::string payload;
  for (int i = 0; i < 256; ++i) payload.push_back(static_cast<char>(i));
  payload += std::string("\0\0\xff\n\r", 5);
  const nlohmann::json meta = {{"epoch", 3}, {"name", "r\u00e9sum\u00e9"}, {"lr", 0.5}};
  const std::string path = store.save(1200, meta, payload);
  EXPECT_EQ(path, dir + "/ckpt_000000001200.ddpckpt");
  EXPECT_EQ(path, store.path_for(1200));

  std::vector<SkippedCheckpoint> skipped;
  const auto ckpt = store.load_latest(&skipped);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(ckpt->step, 1200);
  EXPECT_EQ(ckpt->path, path);
  EXPECT_EQ(ckpt->metadata, meta);
  EXPECT_EQ(ckpt->payload, payload);
  // Nothing but the final file is left behind.
  EXPECT_EQ(files(), std::vector<std::string>{"ckpt_000000001200.ddpckpt"});
}

TEST_F(CheckpointStoreTest, RoundTripsEmptyPayloadAndNullMetadata) {
  CheckpointStore store(dir, 1);
  store.save(0, nlohmann::json(), "");
  const auto ckpt = store.load_latest();
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ(ckpt->step, 0);
  EXPECT_TRUE(ckpt->metadata.is_null());
  EXPECT_TRUE(ckpt->payload.empty());
}

TEST_F(CheckpointStoreTest, LoadsTheNewestAndReplacesASavedStep) {
  CheckpointStore store(dir, 5);
  store.save(10, {{"v", 1}}, "ten");
  store.save(30, {{"v", 1}}, "thirty");
  store.save(20, {{"v", 1}}, "twenty");
  EXPECT_EQ(store.load_latest()->payload, "thirty");
  store.save(30, {{"v", 2}}, "thirty again");
  const auto ckpt = store.load_latest();
  EXPECT_EQ(ckpt->payload, "thirty again");
  EXPECT_EQ(ckpt->metadata["v"], 2);
  EXPECT_EQ(store.list_steps(), (std::vector<int64_t>{10, 20, 30}));
}

TEST_F(CheckpointStoreTest, KeepsOnlyTheNewestN) {
  CheckpointStore store(dir, 2);
  for (int64_t step = 1; step <= 5; ++step) store.save(step * 100, {}, payload_for(step, 100));
  EXPECT_EQ(store.list_steps(), (std::vector<int64_t>{400, 500}));
  EXPECT_EQ(files().size(), 2u);
  // A step older than the others (after a rollback) is kept: it was just written.
  store.save(50, {}, "rolled back");
  EXPECT_EQ(store.list_steps(), (std::vector<int64_t>{50, 500}));
}

TEST_F(CheckpointStoreTest, FallsBackWhenTheNewestIsTruncated) {
  CheckpointStore store(dir, 5);
  store.save(1, {{"step", 1}}, payload_for(1, 4096));
  const std::string newest = store.save(2, {{"step", 2}}, payload_for(2, 4096));
  const std::string intact = read_file(newest);
  const size_t meta_len = std::string(R"({"step":2})").size();
  for (const size_t cut : {size_t{0}, size_t{10}, kHeaderSize - 1, kHeaderSize, kHeaderSize + meta_len / 2,
                           kHeaderSize + meta_len + 1, intact.size() / 2, intact.size() - 9, intact.size() - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(cut));
    write_file(newest, intact.substr(0, cut));
    std::vector<SkippedCheckpoint> skipped;
    const auto ckpt = store.load_latest(&skipped);
    ASSERT_TRUE(ckpt.has_value());
    EXPECT_EQ(ckpt->step, 1);
    EXPECT_EQ(ckpt->payload, payload_for(1, 4096));
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_EQ(skipped[0].path, newest);
    EXPECT_THAT(skipped[0].reason, StartsWith("truncated"));
  }
  write_file(newest, intact.substr(0, 120));
  std::vector<SkippedCheckpoint> skipped;
  store.load_latest(&skipped);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].reason, "truncated: 120 of " + std::to_string(intact.size()) + " bytes");

  write_file(newest, intact + "x");
  skipped.clear();
  EXPECT_EQ(store.load_latest(&skipped)->step, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0].reason, StartsWith("trailing data"));
}

TEST_F(CheckpointStoreTest, SkipsAFlippedBitAnywhere) {
  CheckpointStore store(dir, 5);
  store.save(1, {{"step", 1}}, payload_for(1, 1000));
  const std::string newest = store.save(2, {{"step", 2}}, payload_for(2, 1000));
  const std::string intact = read_file(newest);
  const size_t meta_len = std::string(R"({"step":2})").size();

  const auto expect_skipped = [&](size_t offset, int bit, const std::string& reason_part) {
    SCOPED_TRACE("bit " + std::to_string(bit) + " of byte " + std::to_string(offset));
    write_file(newest, intact);
    flip_bit(newest, offset, bit);
    std::vector<SkippedCheckpoint> skipped;
    const auto ckpt = store.load_latest(&skipped);
    ASSERT_TRUE(ckpt.has_value());
    EXPECT_EQ(ckpt->step, 1);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_EQ(skipped[0].path, newest);
    EXPECT_THAT(skipped[0].reason, HasSubstr(reason_part));
  };
  // Every byte of the header: magic, version, step, lengths, CRCs.
  for (size_t offset = 0; offset < kHeaderSize; ++offset) expect_skipped(offset, static_cast<int>(offset % 8), "");
  expect_skipped(0, 1, "bad magic");
  expect_skipped(16, 0, "header checksum mismatch");  // the step
  expect_skipped(kHeaderSize + 3, 2, "checksum mismatch");             // metadata
  expect_skipped(kHeaderSize + meta_len + 500, 7, "checksum mismatch");  // payload
  expect_skipped(intact.size() - 1, 0, "bad trailer");
}

TEST_F(CheckpointStoreTest, NoValidCheckpointGivesNullopt) {
  CheckpointStore store(dir, 2);
  EXPECT_FALSE(store.load_latest().has_value());
  EXPECT_TRUE(store.list_steps().empty());
  const std::string only = store.save(7, {}, "x");
  flip_bit(only, kHeaderSize + 2);
  std::vector<SkippedCheckpoint> skipped;
  EXPECT_FALSE(store.load_latest(&skipped).has_value());
  EXPECT_EQ(skipped.size(), 1u);
}

TEST_F(CheckpointStoreTest, IgnoresLeftoverTemporaryAndForeignFiles) {
  CheckpointStore store(dir, 2);
  store.save(5, {}, "five");
  // What a writer killed mid-save leaves behind, plus files that only look similar.
  write_file(dir + "/.ckpt_000000000009.ddpckpt.1234.0.abc.tmp", std::string(100, 'z'));
  write_file(dir + "/ckpt_9.ddpckpt", "not canonical");
  write_file(dir + "/ckpt_000000000009.ddpckpt.bak", "backup");
  write_file(dir + "/notes.txt", "hello");
  std::vector<SkippedCheckpoint> skipped;
  const auto ckpt = store.load_latest(&skipped);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ(ckpt->step, 5);
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(store.list_steps(), std::vector<int64_t>{5});
  // Pruning leaves them alone too.
  store.save(6, {}, "six");
  store.save(7, {}, "seven");
  EXPECT_EQ(store.list_steps(), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(files().size(), 6u);
}

TEST_F(CheckpointStoreTest, MissingDirectoryGivesNullopt) {
  CheckpointStore store(dir, 1);
  fs::remove_all(dir);
  EXPECT_FALSE(store.load_latest().has_value());
  EXPECT_TRUE(store.list_steps().empty());
}

// A one-line message that names the path.
void expect_error_naming(const std::function<void()>& f, const std::string& path, const std::string& cause) {
  try {
    f();
    ADD_FAILURE() << "no CheckpointError";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr(cause));
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(CheckpointStoreTest, RejectsBadArguments) {
  expect_error_naming([&] { (void)CheckpointStore(dir, 0); }, dir, "keep");
  expect_error_naming([&] { (void)CheckpointStore(dir, -3); }, dir, "keep");
  CheckpointStore store(dir, 1);
  expect_error_naming([&] { store.save(-1, {}, ""); }, dir, "negative");
  // Invalid UTF-8 cannot be serialized as JSON.
  expect_error_naming([&] { store.save(1, {{"bad", std::string("\xff\xfe")}}, ""); }, dir, "metadata");
  EXPECT_TRUE(files().empty());
}

TEST_F(CheckpointStoreTest, UnwritableTargetThrowsAndLeavesNoTemporaryFile) {
  // The directory path is a regular file.
  const std::string file = root + "/plain";
  write_file(file, "x");
  expect_error_naming([&] { (void)CheckpointStore(file, 2); }, file, "directory");
  expect_error_naming([&] { (void)CheckpointStore(file + "/sub", 2); }, file + "/sub", "directory");

  // The directory disappears (or turns into a file) under a live store.
  // (Permission bits would not stop root, who runs some CI jobs.)
  CheckpointStore store(dir, 2);
  fs::remove_all(dir);
  expect_error_naming([&] { store.save(3, {}, "payload"); }, store.path_for(3), "No such file or directory");
  write_file(dir, "now a file");
  expect_error_naming([&] { store.save(3, {}, "payload"); }, store.path_for(3), "Not a directory");
  EXPECT_THROW(store.list_steps(), CheckpointError);
  EXPECT_THROW(store.load_latest(), CheckpointError);

  // A write error mid-file (here: the file size limit) removes the temporary.
  fs::remove(dir);
  fs::create_directory(dir);
  store.save(1, {}, "small");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // In a child: RLIMIT_FSIZE must not leak into the test process.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      store.save(2, {}, std::string(100000, 'p'));
      ::_exit(1);
    } catch (const CheckpointError& e) {
      ::_exit(std::string(e.what()).find("File too large") != std::string::npos ? 0 : 2);
    } catch (...) {
      ::_exit(3);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(files(), std::vector<std::string>{"ckpt_000000000001.ddpckpt"});
}

// The child of the crash test reports each event on a pipe.
struct CrashEvent {
  int64_t kind;  // kStarted before save(step), kDone after it returned
  int64_t step;
};
constexpr int64_t kStarted = 1;
constexpr int64_t kDone = 2;
size_t crash_payload_size(int64_t step) { return (size_t{2} << 20) + static_cast<size_t>(step % 7) * 4099; }

// Kills and reaps the child however the test ends.
struct ChildGuard {
  pid_t pid = -1;
  int status = 0;
  void reap() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
  }
  ~ChildGuard() { reap(); }
};

TEST_F(CheckpointStoreTest, SurvivesSigkillDuringSave) {
  std::mt19937 rng(std::random_device{}());
  int64_t last_done = 0;  // checkpoints are durable from here on
  for (int round = 0; round < 8; ++round) {
    // Like a restarted trainer: resume from the latest checkpoint.
    int64_t first = 1;
    {
      CheckpointStore store(dir, 2);
      if (const auto ckpt = store.load_latest()) first = ckpt->step + 1;
    }
    // Kill just after save k started (so anywhere inside it), or just after it returned.
    const int64_t kill_step = first + std::uniform_int_distribution<int64_t>(0, 3)(rng);
    const int64_t kill_kind = std::uniform_int_distribution<int64_t>(kStarted, kDone)(rng);
    SCOPED_TRACE("round " + std::to_string(round) + ": kill at step " + std::to_string(kill_step) +
                 (kill_kind == kStarted ? " started" : " done"));

    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ChildGuard child;
    child.pid = ::fork();
    ASSERT_GE(child.pid, 0);
    if (child.pid == 0) {
      ::close(fds[0]);
      try {
        CheckpointStore store(dir, 2);
        for (int64_t step = first; step < first + 1000; ++step) {
          const std::string payload = payload_for(step, crash_payload_size(step));
          CrashEvent started{kStarted, step};
          if (::write(fds[1], &started, sizeof started) != sizeof started) ::_exit(2);
          store.save(step, {{"step", step}, {"size", payload.size()}}, payload);
          CrashEvent done{kDone, step};
          if (::write(fds[1], &done, sizeof done) != sizeof done) ::_exit(2);
        }
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);  // not reached unless the parent never kills
    }
    ::close(fds[1]);
    CrashEvent event{};
    int64_t last_started = 0;
    bool killed = false;
    while (::read(fds[0], &event, sizeof event) == static_cast<ssize_t>(sizeof event)) {
      if (event.kind == kStarted) last_started = event.step;
      if (event.kind == kDone) last_done = event.step;
      if (!killed && event.kind == kill_kind && event.step == kill_step) {
        // The child may already be further on: the pipe holds what it said
        // since, and the loop reads it to the end (EOF, the child is dead),
        // so last_started and last_done are where the child really was.
        child.reap();
        killed = true;
      }
    }
    ::close(fds[0]);
    child.reap();
    ASSERT_TRUE(killed) << "child ended early, status " << child.status;
    ASSERT_TRUE(WIFSIGNALED(child.status));

    CheckpointStore store(dir, 2);
    std::vector<SkippedCheckpoint> skipped;
    const auto ckpt = store.load_latest(&skipped);
    // Renames are atomic: a final-named file is never partial.
    EXPECT_TRUE(skipped.empty()) << skipped[0].path << ": " << skipped[0].reason;
    if (!ckpt) {  // only when killed inside the very first save
      EXPECT_EQ(last_done, 0);
      EXPECT_TRUE(store.list_steps().empty());
      continue;
    }
    // Every completed save survived; the one in flight may or may not have.
    EXPECT_GE(ckpt->step, last_done);
    EXPECT_LE(ckpt->step, last_started);
    EXPECT_EQ(ckpt->metadata["step"], ckpt->step);
    EXPECT_EQ(ckpt->payload.size(), crash_payload_size(ckpt->step));
    EXPECT_TRUE(ckpt->payload == payload_for(ckpt->step, crash_payload_size(ckpt->step)));
    EXPECT_LE(store.list_steps().size(), 3u);  // keep 2, plus one if killed before pruning
  }
}

}  // namespace
}  // namespace ddp
