#include "common/grpc/credentials.h"

#include <grpcpp/grpcpp.h>

#include "common/file_util.h"

namespace eft {
namespace {

// Reads `path` into *pem; an empty path leaves it empty.
Status ReadPem(const std::string& path, std::string* pem) {
  if (path.empty()) return Status::Ok();
  EFT_ASSIGN_OR_RETURN(*pem, ReadFileToString(path));
  return Status::Ok();
}

}  // namespace

Result<ClientTls> LoadClientTls(bool tls, const std::string& ca_file, const std::string& cert_file,
                                const std::string& key_file) {
  ClientTls out;
  out.enabled = tls || !ca_file.empty() || !cert_file.empty() || !key_file.empty();
  EFT_RETURN_IF_ERROR(ReadPem(ca_file, &out.root_certs_pem));
  EFT_RETURN_IF_ERROR(ReadPem(cert_file, &out.cert_chain_pem));
  EFT_RETURN_IF_ERROR(ReadPem(key_file, &out.private_key_pem));
  return out;
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const ClientTls& tls) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.root_certs_pem;
  ssl.pem_cert_chain = tls.cert_chain_pem;
  ssl.pem_private_key = tls.private_key_pem;
  return grpc::SslCredentials(ssl);
}

void AddBearerToken(const std::string& token, grpc::ClientContext* ctx) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

Result<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(const std::string& cert_file,
                                                                        const std::string& key_file,
                                                                        const std::string& client_ca_file) {
  if (cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(client_ca_file.empty()
                                            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  EFT_RETURN_IF_ERROR(ReadPem(cert_file, &pair.cert_chain));
  EFT_RETURN_IF_ERROR(ReadPem(key_file, &pair.private_key));
  EFT_RETURN_IF_ERROR(ReadPem(client_ca_file, &ssl.pem_root_certs));
  ssl.pem_key_cert_pairs.push_back(pair);
  return grpc::SslServerCredentials(ssl);
}

}  // namespace eft
