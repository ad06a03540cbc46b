#include "output/output_router.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace ddp {
namespace {

// A pipe standing in for a worker's stdout or stderr.
struct Pipe {
  Pipe() {
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
  }
  ~Pipe() { close_writer(); }
  void write_text(const std::string& s) { ASSERT_EQ(::write(fds[1], s.data(), s.size()), ssize_t(s.size())); }
  void close_writer() {
    if (fds[1] >= 0) ::close(fds[1]);
    fds[1] = -1;
  }
  int reader() const { return fds[0]; }
  int fds[2] = {-1, -1};
};

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

class OutputRouterTest : public ::testing::Test {
 protected:
  Pipe console_out, console_err, file;
};

TEST_F(OutputRouterTest, PrefixesWholeLinesAndCopiesRawBytesToTheFile) {
  Pipe worker;
  {
    OutputRouter router(0, console_out.fds[1], console_err.fds[1]);
    router.add(worker.reader(), {5, 1, StreamKind::kStdout, true, file.fds[1], std::nullopt});
    file.fds[1] = -1;  // the router owns it now
    worker.write_text("hel");
    EXPECT_TRUE(router.on_readable(worker.reader()));
    worker.write_text("lo\nsecond\npart");
    EXPECT_TRUE(router.on_readable(worker.reader()));
    worker.close_writer();
    EXPECT_FALSE(router.on_readable(worker.reader()));  // end of stream
  }
  console_out.close_writer();
  EXPECT_EQ(read_all(console_out.reader()), "[0:5] hello\n[0:5] second\n[0:5] part\n");
  EXPECT_EQ(read_all(file.reader()), "hello\nsecond\npart");
}

TEST_F(OutputRouterTest, StderrGoesToTheErrorConsoleAndIntoTheTail) {
  Pipe worker;
  OutputRouter router(1, console_out.fds[1], console_err.fds[1], /*tail_lines=*/2);
  router.add(worker.reader(), {3, 0, StreamKind::kStderr, true, -1, std::nullopt});
  worker.write_text("a\nb\nc\n");
  router.drain_local_rank(0);
  EXPECT_EQ(router.stderr_tail(0), (std::vector<std::string>{"b", "c"}));
  EXPECT_TRUE(router.stderr_tail(7).empty());
  console_err.close_writer();
  EXPECT_EQ(read_all(console_err.reader()), "[1:3] a\n[1:3] b\n[1:3] c\n");
  router.reset_tails();
  EXPECT_TRUE(router.stderr_tail(0).empty());
}

TEST_F(OutputRouterTest, RedirectedStreamReachesOnlyTheFile) {
  Pipe worker;
  {
    OutputRouter router(0, console_out.fds[1], console_err.fds[1]);
    router.add(worker.reader(), {0, 0, StreamKind::kStdout, false, file.fds[1], std::nullopt});
    file.fds[1] = -1;
    worker.write_text("quiet\n");
    router.close_all();
  }
  console_out.close_writer();
  EXPECT_EQ(read_all(console_out.reader()), "");
  EXPECT_EQ(read_all(file.reader()), "quiet\n");
}

TEST_F(OutputRouterTest, ATemplatedPrefixReplacesTheNodeAndRank) {
  Pipe worker;
  {
    OutputRouter router(0, console_out.fds[1], console_err.fds[1]);
    router.add(worker.reader(), {5, 1, StreamKind::kStdout, true, -1, std::string("[default1]:")});
    worker.write_text("hello\n");
    router.close_all();
  }
  console_out.close_writer();
  EXPECT_EQ(read_all(console_out.reader()), "[default1]:hello\n");
}

TEST_F(OutputRouterTest, LinesMatchingAFilterAreCopiedPrefixedEvenWhenKeptOffTheConsole) {
  Pipe shown, redirected, errors;
  {
    OutputRouter router(2, console_out.fds[1], console_err.fds[1]);
    router.set_filtered_copy(StreamKind::kStdout, {"loss", "a,b"}, file.fds[1]);
    file.fds[1] = -1;  // the router owns it now
    router.add(shown.reader(), {4, 0, StreamKind::kStdout, true, -1, std::nullopt});
    router.add(redirected.reader(), {5, 1, StreamKind::kStdout, false, -1, std::nullopt});
    router.add(errors.reader(), {4, 0, StreamKind::kStderr, true, -1, std::nullopt});
    shown.write_text("step 1 loss 2.3\nstep 1 acc 0.1\n");
    redirected.write_text("x a,b y\nnothing\n");
    errors.write_text("loss is not copied from stderr\n");
    router.close_all();
  }
  console_out.close_writer();
  EXPECT_EQ(read_all(file.reader()), "[2:4] step 1 loss 2.3\n[2:5] x a,b y\n");
  EXPECT_EQ(read_all(console_out.reader()), "[2:4] step 1 loss 2.3\n[2:4] step 1 acc 0.1\n");
}

}  // namespace
}  // namespace ddp
