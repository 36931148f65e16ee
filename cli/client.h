// What every eftctl command shares: the global options (resolved from flags, the environment and
// ~/.config/eft/config.yaml), the connection to the controller, printing results, and reporting a
// failed call.
#pragma once

#include <memory>
#include <string>

#include <google/protobuf/message.h>

#include "cli/output.h"
#include "common/grpc/credentials.h"
#include "common/status.h"
#include "eft/v1/job.grpc.pb.h"
#include "eft/v1/node.grpc.pb.h"

namespace grpc {
class ClientContext;
class Status;
}  // namespace grpc

namespace eft::cli {

// Where the user's defaults live ($EFT_CONFIG overrides the path).
inline constexpr char kConfigPath[] = "~/.config/eft/config.yaml";

struct GlobalOptions {
  std::string controller;  // HOST:PORT
  std::string token;       // bearer token; "" sends none
  bool tls = false;
  std::string tls_ca;  // PEM file; "" with tls: the system's roots
  std::string output = "table";
  OutputFormat format = OutputFormat::kTable;
  double timeout_s = 10;
};

// Fills what the flags left open, each from its flag, else its environment variable, else the
// config file's key: controller ($EFT_CONTROLLER, `controller:`, else 127.0.0.1:7070), token
// ($EFT_TOKEN, `token:`), tls_ca ($EFT_TLS_CA, `tls_ca:`; implies tls), tls (`tls: true`); and the
// output format. Reads the CA file: INVALID_ARGUMENT "--tls-ca FILE: cannot read it" otherwise.
Result<ClientTls> ResolveGlobalOptions(GlobalOptions* options);

// The two services on one channel. Every call carries the token; unary calls also the deadline.
class ControllerClient {
 public:
  ControllerClient(const GlobalOptions& options, const ClientTls& tls);
  void Auth(grpc::ClientContext* ctx) const;     // the token only (streams)
  void Prepare(grpc::ClientContext* ctx) const;  // the token and the --timeout deadline

  const GlobalOptions& options() const { return options_; }
  v1::JobService::Stub& jobs() { return *jobs_; }
  v1::NodeService::Stub& nodes() { return *nodes_; }

 private:
  const GlobalOptions& options_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
};

// Prints the message in the chosen format (-o json|yaml), or `table` for the table format.
void Print(const GlobalOptions& options, const google::protobuf::Message& message, const std::string& table);

// Reports a failed call on stderr ("eftctl: WHAT: controller unreachable: ...") and returns 1.
int Fail(const std::string& what, const grpc::Status& status);

}  // namespace eft::cli
