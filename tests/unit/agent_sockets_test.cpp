// remove_sockets_of_dead_agents (agent/local_agent_service.h): the sockets of
// agents killed with SIGKILL go; live agents' sockets and other files stay.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/local_agent_service.h"
#include "dead_pid.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

// A socket file at `path` with nobody listening, as a killed agent leaves it.
void leave_socket(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.string().size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  ::close(fd);
}

using ddp::testing::dead_pid;

TEST(AgentSockets, OnlyTheSocketsOfDeadAgentsAreRemoved) {
  const fs::path dir = fs::temp_directory_path() / ("ddp_sockets_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int dead = dead_pid();
  const fs::path dead_socket = dir / (std::to_string(dead) + ".sock");
  const fs::path live_socket = dir / (std::to_string(::getpid()) + ".sock");
  const fs::path not_a_pid = dir / "agent.sock";
  const fs::path not_a_socket = dir / (std::to_string(dead_pid()) + ".sock.json");
  const fs::path regular_file_named_like_one = dir / (std::to_string(dead_pid()) + ".sock");
  leave_socket(dead_socket);
  leave_socket(live_socket);
  leave_socket(not_a_pid);
  std::ofstream(not_a_socket) << "{}";
  std::ofstream(regular_file_named_like_one) << "not a socket";
  const fs::path dead_announcements = dir / (std::to_string(dead) + ".py.4242.ann");
  const fs::path live_announcements = dir / (std::to_string(::getpid()) + ".py.4242.ann");
  std::ofstream(dead_announcements) << "DDPA";
  std::ofstream(live_announcements) << "DDPA";

  remove_sockets_of_dead_agents(dir.string());

  EXPECT_FALSE(fs::exists(dead_socket));
  EXPECT_TRUE(fs::exists(live_socket));
  EXPECT_TRUE(fs::exists(not_a_pid));
  EXPECT_TRUE(fs::exists(not_a_socket));
  EXPECT_TRUE(fs::exists(regular_file_named_like_one));
  EXPECT_FALSE(fs::exists(dead_announcements)) << "a companion's file its dead agent never mapped";
  EXPECT_TRUE(fs::exists(live_announcements));
  fs::remove_all(dir);
}

TEST(AgentSockets, AMissingDirectoryIsNotAnError) {
  EXPECT_NO_THROW(remove_sockets_of_dead_agents("/nonexistent/ddp_sockets"));
}

}  // namespace
}  // namespace ddp
