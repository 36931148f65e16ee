// A node's network address, and the rule for a rank's addresses (docs/architecture.md, "Rank
// traffic and the node's address").
//
// eft-worker turns what the operator gives (--address / --data-address: an IP address, a host name
// or an interface name) into one numeric address at start (ResolveNodeAddress), so that every rank
// binds its collectives to it and tells its peers exactly that, instead of what the host name
// resolves to (127.0.1.1 on many cloned images). A loopback address only reaches processes in the
// same network stack (one kernel, one network namespace: NetworkStackId), so a job whose ranks span
// nodes may use one only when all its nodes share that stack (several workers on one host: the
// tests, the demo); CheckRankAddresses is that rule, applied by each rank before its rendezvous.
//
// libc only (getaddrinfo, getifaddrs, /proc): every program links common/, the trainer included.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace eft::net {

// True for a numeric loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z) and for the name
// "localhost". Other names are not resolved: resolve them first (ResolveNumeric).
bool IsLoopback(std::string_view host);

// `host` as one numeric address: a numeric address as is (in its canonical text form), a name as
// getaddrinfo resolves it, preferring an address other hosts may reach (the first non-loopback IPv4
// address, else the first non-loopback IPv6 one, else the first). NOT_FOUND naming the host when it
// does not resolve.
Result<std::string> ResolveNumeric(const std::string& host);

// The IPv4 address of this host's network interface `name` ("eth1"). NOT_FOUND when there is no
// such interface, FAILED_PRECONDITION when it has no IPv4 address.
Result<std::string> AddressOfInterface(const std::string& name);

// The name of this host's interface that holds the numeric `address`, or whose subnet contains it
// (127.0.1.1 is lo's). NOT_FOUND when no interface does.
Result<std::string> InterfaceOf(const std::string& address);

// An address as an operator gives it (--address, --data-address): the name of an interface of this
// host is that interface's IPv4 address (AddressOfInterface), anything else ResolveNumeric's answer.
// Errors name `given` and say why.
Result<std::string> ResolveNodeAddress(const std::string& given);

// This process's network stack: "<kernel boot id>/<network namespace inode>". Two processes with
// the same one reach each other over loopback; two with different ones (two hosts, two containers
// with their own network) do not. "" when /proc does not say.
std::string NetworkStackId();

// What a rank knows about its addresses, for CheckRankAddresses.
struct RankAddresses {
  int world = 1;        // WORLD_SIZE
  int local_world = 1;  // LOCAL_WORLD_SIZE: the ranks on this node
  std::string node_name;
  // The numeric address this rank's collectives bind to: EFT_NODE_ADDRESS from eft-worker, else what
  // the host name resolves to when Gloo binds that. "": not known (the rank's collectives pick their
  // interface themselves), and only MASTER_ADDR is checked.
  std::string node_address;
  bool node_address_from_host_name = false;  // the host name's address, not a launcher's
  std::string master_addr;                   // MASTER_ADDR as given
  bool master_is_loopback = false;           // what it resolves to is a loopback address
  // Whether every node of the job shares this node's network stack (EFT_NODES_SHARE_LOOPBACK, the
  // controller's finding from its nodes' NetworkStackId); nullopt: not known.
  std::optional<bool> nodes_share_loopback;
};

// The rule: a rank whose job spans nodes (world > local_world) may use a loopback address, as its
// own address or as MASTER_ADDR, only when every node of the job is in one network stack. When
// that is not known, both must be loopback (a cluster on one host, as far as addresses tell) or
// neither. FAILED_PRECONDITION otherwise, with one line that names the address, the node and the
// fix; the rank then exits with the rank protocol's bad-input code, before its rendezvous.
Status CheckRankAddresses(const RankAddresses& rank);

}  // namespace eft::net
