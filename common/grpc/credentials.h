// gRPC credentials, both ends of docs/auth.md: how eft-worker, eftctl and the tests reach the
// controller (TLS or plaintext, bearer token), and what the controller serves with.
//
// PEM files are read once, into ClientTls/ServerTls, when a program starts: bad paths fail then,
// and a worker that makes a new channel after every failed call does not read them again.
// In eft_grpc (common/grpc), not eft_common: the trainer links that and has no gRPC.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace grpc {
class ChannelCredentials;
class ClientContext;
class ServerCredentials;
}  // namespace grpc

namespace eft {

// TLS towards the controller, as PEM text. Without `enabled` the channel is plaintext.
struct ClientTls {
  bool enabled = false;
  std::string root_certs_pem;   // trusted roots; empty: the system's
  std::string cert_chain_pem;   // client certificate and key, for a controller that requires them
  std::string private_key_pem;  // (--tls-client-ca); both or neither
};

// Reads the named PEM files (an empty name: none). TLS is on when `tls` is set or any file is
// named. A file that cannot be read is an error naming it and the reason.
Result<ClientTls> LoadClientTls(bool tls, const std::string& ca_file, const std::string& cert_file = "",
                                const std::string& key_file = "");

// Plaintext, or TLS with the given roots and client certificate.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const ClientTls& tls);

// Adds "authorization: Bearer <token>" to one call; nothing when `token` is empty. (Not gRPC call
// credentials: gRPC refuses to send those over a plaintext channel, and a loopback controller
// without TLS still takes tokens.)
void AddBearerToken(const std::string& token, grpc::ClientContext* ctx);

// The controller's side: plaintext when `cert_file` is empty, else TLS with that certificate chain
// and key, and with `client_ca_file` also requiring client certificates signed by it (mutual TLS).
// A file that cannot be read is an error naming it and the reason.
Result<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(const std::string& cert_file,
                                                                        const std::string& key_file,
                                                                        const std::string& client_ca_file);

}  // namespace eft
