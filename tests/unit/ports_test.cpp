// MASTER_PORT: a free port picked below the kernel's ephemeral range, where
// no outgoing connection can take it before rank 0 listens (topology/ports.h).
#include "topology/ports.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/usage_error.h"

namespace ddp {
namespace {

TEST(PortsTest, TheEphemeralRangeIsReadAsTheKernelWritesIt) {
  EXPECT_EQ(parse_port_range("32768\t60999\n"), std::make_pair(32768, 60999));
  EXPECT_EQ(parse_port_range("1024 65535"), std::make_pair(1024, 65535));
  for (const char* bad : {"", "32768", "x y", "60999 32768", "0 100", "1 70000", "1 2 3"}) {
    EXPECT_FALSE(parse_port_range(bad).has_value()) << bad;
  }
}

TEST(PortsTest, APickedPortIsFreeAndBelowTheEphemeralRange) {
  const int start = ephemeral_port_range().first;
  for (int i = 0; i < 20; ++i) {
    const int port = pick_free_port("127.0.0.1");
    if (start > 10032) {
      EXPECT_GE(port, 10000);
      EXPECT_LT(port, start) << "an outgoing connection could take it";
    }
    EXPECT_TRUE(can_bind("127.0.0.1", port)) << port;
  }
}

TEST(PortsTest, APortSomeoneListensOnIsRefusedByName) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int taken = ntohs(addr.sin_port);
  EXPECT_FALSE(can_bind("127.0.0.1", taken));
  try {
    ensure_port_free("127.0.0.1", taken);
    ADD_FAILURE() << "a port in use was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot use 127.0.0.1:" + std::to_string(taken) +
                                         " as MASTER_PORT: Address already in use");
  }
  ::close(fd);
}

}  // namespace
}  // namespace ddp
