// What a failed call to the controller means in words a person can act on. gRPC's own text for a
// port nobody listens on ("failed to connect to all addresses; last error: UNKNOWN: ipv4:...:
// Failed to connect to remote host: Connection refused") names neither the cause nor the fix.
#pragma once

#include <string>

#include <grpcpp/support/status.h>

namespace eft {

// For UNAVAILABLE (and gRPC's answer from an HTTP/1 server) a short cause: "nothing listens on
// 127.0.0.1:7999 (connection refused)", "127.0.0.1:8080 answers HTTP/1, not gRPC (the controller's
// REST --http port?)", "cannot resolve host x"; "" for any other status (use its message).
std::string DescribeUnreachable(const grpc::Status& status, const std::string& address);

}  // namespace eft
