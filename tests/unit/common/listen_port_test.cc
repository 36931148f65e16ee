// CheckPortFreeToListen and PickFreeLoopbackPort against real sockets on this host.
#include "common/listen_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace eft {
namespace {

// A listening socket on `addr` (an IPv4 address in host order) and an ephemeral port.
int Listen(uint32_t addr, int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 1) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(ListenPortTest, APortSomeoneListensOnIsBusyWhateverTheAddress) {
  for (uint32_t addr : {INADDR_LOOPBACK, INADDR_ANY}) {
    int port = 0;
    int fd = Listen(addr, &port);
    ASSERT_GE(fd, 0);
    Status s = CheckPortFreeToListen(port);
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
    EXPECT_NE(s.message().find(std::to_string(port)), std::string::npos) << s;
    ::close(fd);
    // Free again once the holder is gone (the check itself leaves nothing behind).
    EXPECT_TRUE(CheckPortFreeToListen(port).ok());
    EXPECT_TRUE(CheckPortFreeToListen(port).ok());
  }
}

TEST(ListenPortTest, OutOfRangePortsAreRefused) {
  EXPECT_EQ(CheckPortFreeToListen(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPortFreeToListen(70000).code(), StatusCode::kInvalidArgument);
}

// Picks are usable ports that nothing holds, between 10000 and the ephemeral range (no outgoing
// connection takes them before the caller binds), and they vary, which keeps concurrent local
// rendezvous apart (8 picks of ~22,000 ports: all equal by chance with probability ~1e-30).
TEST(ListenPortTest, PickedLoopbackPortsAreFreeAndBelowTheEphemeralRange) {
  const int ephemeral = EphemeralPorts().first;
  std::set<int> seen;
  for (int i = 0; i < 8; ++i) {
    const int p = PickFreeLoopbackPort();
    ASSERT_GT(p, 0);
    ASSERT_LE(p, 65535);
    EXPECT_TRUE(CheckPortFreeToListen(p).ok()) << p;
    if (ephemeral - 10000 >= 1000) {
      EXPECT_GE(p, 10000);
      EXPECT_LT(p, ephemeral);
    }
    seen.insert(p);
  }
  EXPECT_GT(seen.size(), 1u);
}

TEST(ListenPortTest, TheEphemeralRangeIsReadOrLinuxsDefault) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  auto read = [](const std::string& file) {
    PortRange r = EphemeralPorts(file);
    return std::pair{r.first, r.last};
  };
  EXPECT_EQ(read(write("range-ok", "20000\t40999\n")), std::pair(20000, 40999));
  const std::pair linux_default(32768, 60999);
  EXPECT_EQ(read(write("range-garbage", "low high\n")), linux_default);
  EXPECT_EQ(read(write("range-reversed", "60999 20000\n")), linux_default);
  EXPECT_EQ(read(write("range-truncated", "20000")), linux_default);
  EXPECT_EQ(read(dir + "/no-such-file"), linux_default);
}

}  // namespace
}  // namespace eft
