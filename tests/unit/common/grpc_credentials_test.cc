// common/grpc/credentials.h against real gRPC servers on loopback: plaintext and TLS (with a
// certificate made by openssl) must each connect with the credentials made for them and fail with
// the other kind; unreadable PEM files fail when loaded, naming the file.
#include "common/grpc/credentials.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "eft/v1/node.grpc.pb.h"

namespace eft {
namespace {

namespace fs = std::filesystem;

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "eft-credentials-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    fs::remove_all(dir_);
  }
  // A server on a free loopback port; the (unimplemented) service only gives it something to serve.
  void StartServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    ASSERT_GT(port_, 0);
  }
  bool Connects(const std::shared_ptr<grpc::ChannelCredentials>& credentials, std::chrono::milliseconds wait) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), credentials);
    return channel->WaitForConnected(std::chrono::system_clock::now() + wait);
  }
  // A self-signed certificate for 127.0.0.1 (its own CA), as tests/e2e/auth_test.cc makes it.
  bool MakeCertificate() {
    std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "
                      "/CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
                      key() + " -out " + cert() + " > " + dir_ + "/openssl.log 2>&1";
    return std::system(cmd.c_str()) == 0;
  }
  std::string cert() const { return dir_ + "/cert.pem"; }
  std::string key() const { return dir_ + "/key.pem"; }

  std::string dir_;
  int port_ = 0;
  v1::NodeService::Service service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(CredentialsTest, MissingCaFileIsAnErrorNamingIt) {
  auto tls = LoadClientTls(false, dir_ + "/no-ca.pem");
  ASSERT_FALSE(tls.ok());
  EXPECT_EQ(tls.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tls.status().message(), "cannot read " + dir_ + "/no-ca.pem: No such file or directory");
}

TEST_F(CredentialsTest, MissingServerKeyIsAnErrorNamingIt) {
  std::ofstream(cert()) << "not really a certificate";
  auto creds = LoadServerCredentials(cert(), dir_ + "/no-key.pem", "");
  ASSERT_FALSE(creds.ok());
  EXPECT_NE(creds.status().message().find(dir_ + "/no-key.pem"), std::string::npos) << creds.status();
}

TEST_F(CredentialsTest, PlaintextWithoutTlsOrCa) {
  auto tls = LoadClientTls(false, "");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_FALSE(tls->enabled);
  auto server_creds = LoadServerCredentials("", "", "");
  ASSERT_TRUE(server_creds.ok()) << server_creds.status();
  StartServer(*server_creds);
  EXPECT_TRUE(Connects(MakeChannelCredentials(*tls), std::chrono::seconds(10)));
  // The same server refuses a TLS handshake: the credentials above really were plaintext.
  ClientTls system_roots;
  system_roots.enabled = true;
  EXPECT_FALSE(Connects(MakeChannelCredentials(system_roots), std::chrono::milliseconds(1500)));
}

TEST_F(CredentialsTest, TlsWithTheServersCaConnectsAndPlaintextDoesNot) {
  if (std::system("openssl version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: the openssl program is missing (Debian package openssl); it makes the certificate";
  }
  ASSERT_TRUE(MakeCertificate());
  auto server_creds = LoadServerCredentials(cert(), key(), "");
  ASSERT_TRUE(server_creds.ok()) << server_creds.status();
  StartServer(*server_creds);
  auto tls = LoadClientTls(false, cert());
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->enabled) << "a CA file implies TLS";
  EXPECT_TRUE(Connects(MakeChannelCredentials(*tls), std::chrono::seconds(10)));
  EXPECT_FALSE(Connects(MakeChannelCredentials(ClientTls{}), std::chrono::milliseconds(1500)));
}

}  // namespace
}  // namespace eft
