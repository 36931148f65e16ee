#include "common/grpc/unreachable.h"

namespace eft {

std::string DescribeUnreachable(const grpc::Status& status, const std::string& address) {
  const std::string& m = status.error_message();
  auto has = [&](const char* text) { return m.find(text) != std::string::npos; };
  // An HTTP/1 server answers gRPC's preface with an error gRPC reports as UNAVAILABLE or INTERNAL.
  if (has("http1.x") || has("HTTP/1")) {
    return address + " answers HTTP/1, not gRPC (the controller's REST --http port?)";
  }
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  if (has("Connection refused")) return "nothing listens on " + address + " (connection refused)";
  if (has("DNS resolution failed") || has("Name or service not known")) return "cannot resolve " + address;
  if (has("Deadline Exceeded") || has("Timeout occurred") || has("Connection timed out")) {
    return "no answer from " + address + " (connection timed out: a firewall, or a wrong address?)";
  }
  return "";
}

}  // namespace eft
