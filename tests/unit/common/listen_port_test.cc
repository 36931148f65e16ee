// CheckPortFreeToListen against real sockets on this host.
#include "common/listen_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

// Two picks in a row are usable ports that nothing holds (the kernel hands out ports round-robin, so
// they also differ, which keeps concurrent local rendezvous apart).
TEST(ListenPortTest, PickedLoopbackPortsAreFree) {
  const int a = PickFreeLoopbackPort(), b = PickFreeLoopbackPort();
  for (int p : {a, b}) {
    ASSERT_GT(p, 0);
    ASSERT_LE(p, 65535);
    EXPECT_TRUE(CheckPortFreeToListen(p).ok()) << p;
  }
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace eft
