#include "common/listen_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

namespace eft {
namespace {

// Binds `addr` as a listening server would (SO_REUSEADDR, so sockets of an earlier attempt still in
// TIME_WAIT do not count as busy). Returns 0 or the errno of the bind; EAFNOSUPPORT when the host
// has no such address family.
int TryBind(int family, const sockaddr* addr, socklen_t len) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  int err = 0;
  if (::bind(fd, addr, len) != 0) {
    err = errno;
  } else if (::listen(fd, 1) != 0) {
    err = errno;
  }
  ::close(fd);
  return err;
}

}  // namespace

Status CheckPortFreeToListen(int port) {
  if (port < 1 || port > 65535) return Status::InvalidArgument("port " + std::to_string(port) + " is out of range");
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_addr.s_addr = htonl(INADDR_ANY);
  v4.sin_port = htons(static_cast<uint16_t>(port));
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_addr = in6addr_any;
  v6.sin6_port = htons(static_cast<uint16_t>(port));
  for (int err : {TryBind(AF_INET, reinterpret_cast<const sockaddr*>(&v4), sizeof(v4)),
                  TryBind(AF_INET6, reinterpret_cast<const sockaddr*>(&v6), sizeof(v6))}) {
    if (err == 0 || err == EAFNOSUPPORT || err == EADDRNOTAVAIL) continue;
    if (err == EADDRINUSE) {
      return Status::AlreadyExists("port " + std::to_string(port) + " is in use by another program on this host");
    }
    return Status::Internal("cannot listen on port " + std::to_string(port) + ": " + std::strerror(err));
  }
  return Status::Ok();
}

PortRange EphemeralPorts(const std::string& range_file) {
  std::ifstream in(range_file);
  int first = 0, last = 0;
  if (in >> first >> last && first >= 1 && first <= last && last <= 65535) return PortRange{first, last};
  return PortRange{};
}

int PickFreeLoopbackPort() {
  // Below the ephemeral range, where no outgoing connection takes the port between this check and
  // the caller's bind (a port the kernel hands out for port 0 is in that range: any connect() on
  // the host may take it next). Above 10000, clear of the usual fixed service ports.
  constexpr int kFirst = 10000;
  const int end = EphemeralPorts().first;
  if (end - kFirst >= 1000) {
    thread_local std::mt19937 rng(std::random_device{}());
    for (int i = 0; i < 64; ++i) {
      const int port = kFirst + static_cast<int>(rng() % static_cast<unsigned>(end - kFirst));
      if (CheckPortFreeToListen(port).ok()) return port;
    }
  }
  // A host whose ephemeral range starts low (or 64 busy ports in a row): what the kernel hands out.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace eft
