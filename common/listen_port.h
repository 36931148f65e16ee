// Whether a TCP port can be listened on by this host, the way c10d's TCPStore server listens on
// MASTER_PORT (every address, IPv4 and IPv6). Rank 0 checks MASTER_PORT before its rendezvous so a
// port that another program holds is reported as such (rank::ExitCode::kRendezvousPortBusy) instead
// of as a failed rendezvous that would count against the job's restarts.
#pragma once

#include <string>

#include "common/status.h"

namespace eft {

// OK when the port is free. ALREADY_EXISTS when something listens on it (any address); other errors
// (no permission for a port below 1024, no sockets) as INTERNAL. Binds and closes at once: another
// program can still take the port before the caller binds it, which the caller's own bind reports.
Status CheckPortFreeToListen(int port);

// A TCP port free to listen on at this moment, for a local rendezvous: a random one between 10000 and
// the kernel's ephemeral range (which outgoing connections take ports from), or, where that range
// starts too low, what the kernel hands out for port 0. The caller's own bind says whether it is
// still free. 0 when no socket could be bound.
int PickFreeLoopbackPort();

// The kernel's ephemeral port range, from which outgoing connections take their ports, as
// `range_file` (normally /proc/sys/net/ipv4/ip_local_port_range, "first last") gives it; Linux's
// default, 32768..60999, when it cannot be read.
struct PortRange {
  int first = 32768;
  int last = 60999;
};
PortRange EphemeralPorts(const std::string& range_file = "/proc/sys/net/ipv4/ip_local_port_range");

}  // namespace eft
