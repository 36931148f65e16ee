// Whether a TCP port can be listened on by this host, the way c10d's TCPStore server listens on
// MASTER_PORT (every address, IPv4 and IPv6). Rank 0 checks MASTER_PORT before its rendezvous so a
// port that another program holds is reported as such (rank::ExitCode::kRendezvousPortBusy) instead
// of as a failed rendezvous that would count against the job's restarts.
#pragma once

#include "common/status.h"

namespace eft {

// OK when the port is free. ALREADY_EXISTS when something listens on it (any address); other errors
// (no permission for a port below 1024, no sockets) as INTERNAL. Binds and closes at once: another
// program can still take the port before the caller binds it, which the caller's own bind reports.
Status CheckPortFreeToListen(int port);

// A TCP port on 127.0.0.1 that the kernel just handed out as free (bind to port 0), for a local
// rendezvous. Free at this moment only: the caller's own bind says whether it still is. 0 when no
// socket could be bound.
int PickFreeLoopbackPort();

}  // namespace eft
