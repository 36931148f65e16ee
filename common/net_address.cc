#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

namespace eft::net {
namespace {

std::string Text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

// The canonical text of a numeric address; nullopt for anything else (a name).
std::optional<std::string> Numeric(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  char buf[INET6_ADDRSTRLEN] = {0};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return std::string(::inet_ntop(AF_INET, &v4, buf, sizeof(buf)));
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return std::string(::inet_ntop(AF_INET6, &v6, buf, sizeof(buf)));
  return std::nullopt;
}

struct IfAddrsDeleter {
  void operator()(ifaddrs* p) const { ::freeifaddrs(p); }
};
using IfAddrs = std::unique_ptr<ifaddrs, IfAddrsDeleter>;

Result<IfAddrs> Interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return Status::Internal(std::string("getifaddrs: ") + std::strerror(errno));
  return IfAddrs(list);
}

// Whether `a` and `b` (same family) agree on the bits set in `mask`.
bool SameSubnet(const sockaddr* a, const sockaddr* b, const sockaddr* mask) {
  if (a->sa_family != b->sa_family || mask == nullptr || mask->sa_family != a->sa_family) return false;
  const unsigned char *x, *y, *m;
  size_t n;
  if (a->sa_family == AF_INET) {
    x = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr);
    y = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in*>(b)->sin_addr);
    m = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else if (a->sa_family == AF_INET6) {
    x = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
    y = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr);
    m = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  } else {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if ((x[i] & m[i]) != (y[i] & m[i])) return false;
  }
  return true;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

bool IsLoopback(std::string_view host) {
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Result<std::string> ResolveNumeric(const std::string& host) {
  if (host.empty()) return Status::InvalidArgument("an empty host name does not resolve");
  if (auto numeric = Numeric(host)) return *numeric;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    return Status::NotFound("host name " + host + " does not resolve (" + ::gai_strerror(rc) + ")");
  }
  std::vector<std::string> all;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) all.push_back(Text(a->ai_addr));
  }
  ::freeaddrinfo(found);
  if (all.empty()) return Status::NotFound("host name " + host + " resolves to no IP address");
  // Other hosts must reach the answer: a real address before a loopback one, IPv4 before IPv6.
  for (bool v4 : {true, false}) {
    for (const std::string& a : all) {
      if ((a.find(':') == std::string::npos) == v4 && !IsLoopback(a)) return a;
    }
  }
  return all.front();
}

Result<std::string> AddressOfInterface(const std::string& name) {
  EFT_ASSIGN_OR_RETURN(IfAddrs list, Interfaces());
  bool exists = false;
  for (const ifaddrs* i = list.get(); i != nullptr; i = i->ifa_next) {
    if (name != i->ifa_name) continue;
    exists = true;
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET) return Text(i->ifa_addr);
  }
  if (!exists) return Status::NotFound("this host has no network interface " + name);
  return Status::FailedPrecondition("network interface " + name + " has no IPv4 address");
}

Result<std::string> InterfaceOf(const std::string& address) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* parsed = nullptr;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &parsed) != 0) {
    return Status::InvalidArgument(address + " is not a numeric IP address");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(parsed, &::freeaddrinfo);
  EFT_ASSIGN_OR_RETURN(IfAddrs list, Interfaces());
  const sockaddr* want = parsed->ai_addr;
  const std::string canonical = Text(want);
  // The interface that holds the address itself, else one whose subnet contains it.
  for (const ifaddrs* i = list.get(); i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == want->sa_family && Text(i->ifa_addr) == canonical) {
      return std::string(i->ifa_name);
    }
  }
  for (const ifaddrs* i = list.get(); i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && SameSubnet(i->ifa_addr, want, i->ifa_netmask)) return std::string(i->ifa_name);
  }
  return Status::NotFound("no network interface of this host holds " + address);
}

Result<std::string> ResolveNodeAddress(const std::string& given) {
  if (given.empty()) return Status::InvalidArgument("an empty address");
  if (auto numeric = Numeric(given)) return *numeric;
  Result<std::string> of_interface = AddressOfInterface(given);
  if (of_interface.ok() || of_interface.status().code() != StatusCode::kNotFound) return of_interface;
  Result<std::string> resolved = ResolveNumeric(given);
  if (!resolved.ok()) {
    return Status::NotFound(given + " is not a network interface of this host, and " + resolved.status().message());
  }
  return resolved;
}

std::string NetworkStackId() {
  std::string boot_id;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot_id);
  boot_id = Trim(boot_id);
  char link[64] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/net", link, sizeof(link) - 1);  // "net:[4026531840]"
  if (boot_id.empty() || n <= 0) return "";
  std::string ns(link, static_cast<size_t>(n));
  const size_t open = ns.find('['), close = ns.find(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return "";
  return boot_id + "/" + ns.substr(open + 1, close - open - 1);
}

Status CheckRankAddresses(const RankAddresses& r) {
  if (r.local_world < 1 || r.world <= r.local_world) return Status::Ok();  // one node: loopback is fine
  const bool node_loopback = !r.node_address.empty() && IsLoopback(r.node_address);
  if (!node_loopback && !r.master_is_loopback) return Status::Ok();
  if (r.nodes_share_loopback.has_value()) {
    if (*r.nodes_share_loopback) return Status::Ok();
  } else if (r.node_address.empty() || node_loopback == r.master_is_loopback) {
    return Status::Ok();  // not known otherwise: loopback on both sides is a cluster on one host
  }
  const int nodes = (r.world + r.local_world - 1) / r.local_world;
  const std::string span = "this job's ranks span " + std::to_string(nodes) + " nodes";
  const std::string others =
      r.nodes_share_loopback.has_value() ? span + " that are not all on this host"
                                         : span + " and MASTER_ADDR " + r.master_addr + " is on another host";
  const std::string node = r.node_name.empty() ? std::string("this node") : r.node_name;
  if (node_loopback && r.node_address_from_host_name) {
    return Status::FailedPrecondition(
        "this host's name " + node + " resolves to " + r.node_address +
        ", a loopback address, which Gloo would bind, but " + others + ": map " + node +
        " to an address the other nodes reach (/etc/hosts) or set GLOO_SOCKET_IFNAME to the interface that "
        "reaches them (under eft-worker: --address or --data-address)");
  }
  if (node_loopback) {
    return Status::FailedPrecondition("node address " + r.node_address + " (" + node +
                                      ") is a loopback address, but " + others + ": start eft-worker on " + node +
                                      " with --address (or --data-address) set to an address the other nodes reach");
  }
  return Status::FailedPrecondition(
      "MASTER_ADDR " + r.master_addr + " is a loopback address, but " + span + " and this one (" + node +
      (r.node_address.empty() ? "" : ", " + r.node_address) +
      ") is not on rank 0's host: start eft-worker on rank 0's node with --address (or --data-address) set to an "
      "address the other nodes reach");
}

}  // namespace eft::net
